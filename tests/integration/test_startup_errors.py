"""A job that cannot start, on real sshd nodes with real torchrun: its report names
python's own line (a mistyped script), not torchrun's "worker failed with exitcode 2"
that follows it, and the node history does not hold the job's mistake against a node."""

from __future__ import annotations

import json
import shutil

from fakecluster import FakeCluster, tagged, wait_for
from helpers import REPO, Cfg, free_port, on_cluster
from test_reports import saved_report

FAULTY = REPO / "tests" / "jobs" / "faulty_train.py"


def test_a_mistyped_script_is_the_cause_and_no_nodes_fault(fake: FakeCluster, cfg: Cfg) -> None:
    job = "rtypo"
    work = cfg.tmp / "work"
    work.mkdir()
    shutil.copy(FAULTY, work / "train.py")  # the script is there; the command misspells it
    path = cfg.write(f"""
    job: {job}
    nodes: [node0, node1]
    workdir: {work}
    master_port: {free_port()}
    env: {{OMP_NUM_THREADS: "1"}}
    command: >-
      exec python3 -m torch.distributed.run --nnodes={{nnodes}} --node_rank={{node_rank}}
      --nproc_per_node={{nproc_per_node}} --master_addr={{master_addr}} --master_port={{master_port}}
      trian.py
    launch: {{ready_timeout: 90}}
    kill: {{grace: 3}}
    {on_cluster()}
    """)
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    report = saved_report(fake, cfg, path, job, 90)
    wait_for(lambda: not tagged(job), 30, what="the job gone")
    want = f"python3: can't open file '{work}/trian.py': [Errno 2] No such file or directory"
    assert report["cause"] == want, report["headline"]
    cause = next(n for n in report["nodes"] if n["node"] == report["cause_node"])
    assert cause["finding"]["cause"] == "startup-error" and cause["finding"]["mistake"]
    log = fake.node(report["cause_node"]).log(job)
    assert "worker failed" not in report["cause"] and "trian.py FAILED" in log
    res = cfg.mntui(path, "nodes", "--history", "--json")
    assert res.returncode == 0, res.stderr
    nodes = {h["node"]: h for h in json.loads(res.stdout)["nodes"]}
    assert {n: (h["runs"], len(h["caused"])) for n, h in nodes.items()} == {
        "node0": (1, 0),
        "node1": (1, 0),
    }, nodes
