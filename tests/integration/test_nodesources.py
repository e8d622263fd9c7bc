"""Nodes from a hostfile (a real 2-node torchrun job on real sshd nodes) and from a real
one-host Slurm (tests/slurm.py): read by every command, recorded by the launch, and
the run's recorded nodes kept once the source changes or its allocation ends."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg, free_port, step_count, torch_job
from slurm import OneHostSlurm

from mntui.sessions.config.slurmjobs import expand_nodelist, scontrol_hostnames
from mntui.sessions.runs import latest


def nodes_json(cfg: Cfg, path: Path, **kw: object) -> dict:  # type: ignore[type-arg]
    res = cfg.mntui(path, "nodes", "--json", **kw)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def test_torchrun_from_a_hostfile_keeps_its_nodes(fake: FakeCluster, cfg: Cfg) -> None:
    job = "thostfile"
    hosts = cfg.tmp / "hosts"
    hosts.write_text("# DeepSpeed format\nnode0 slots=1\n\nnode1 slots=1  # second box\n")
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), free_port(), "{hostfile: hosts}"))
    listed = nodes_json(cfg, path)
    assert [(n["node"], n["rank"], n["nproc"]) for n in listed["nodes"]] == [
        ("node0", 0, 1),
        ("node1", 1, 1),
    ]
    assert listed["source"]["kind"] == "hostfile" and listed["world_size"] == 2
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(
        lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in ("node0", "node1")),
        90,
        what="both nodes training",
    )
    log0, log1 = fake.node("node0").log(job), fake.node("node1").log(job)
    assert "NNODES=2" in log0 and "WORLD_SIZE=2" in log0 and "WORLD_SIZE=2" in log1
    assert "rank 0/2 up" in log0 and "rank 1/2 up" in log1
    record = latest(job)
    assert record is not None and record.node_source is not None
    assert record.node_source["nodes"] == [["node0", 1], ["node1", 1]]
    assert [n.nproc for n in record.nodes] == [1, 1]

    # The hostfile changes under the live run: its commands keep the run's nodes.
    hosts.write_text("node1 slots=1\nnode2 slots=1\n")
    listed = nodes_json(cfg, path)
    assert [n["node"] for n in listed["nodes"]] == ["node0", "node1"]
    assert listed["source"]["recorded_by_run"] == record.run_id
    assert "mntui kill" in listed["source"]["why"]
    refused = cfg.mntui(path, "launch", "--no-ui")
    assert refused.returncode == 1 and f"recorded: hostfile {hosts}" in refused.stderr
    assert tagged(job, "node2") == []
    status = json.loads(cfg.mntui(path, "status", "--json").stdout)
    assert [n["state"] for n in status["nodes"]] == ["running", "running"]
    killed = cfg.mntui(path, "kill")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert tagged(job, "node0") == [] and tagged(job, "node1") == []
    # The run is over: the next command reads the hostfile anew.
    assert [n["node"] for n in nodes_json(cfg, path)["nodes"]] == ["node1", "node2"]


def test_bad_hostfiles_are_one_line_errors(fake: FakeCluster, cfg: Cfg) -> None:
    hosts = cfg.tmp / "hosts"
    path = cfg.write("job: tbadhosts\nnodes: {hostfile: hosts}\ncommand: x\n")
    for text, said in [
        ("node0 slots=2\nnode1 slots=two\n", "hosts:2: slots=two: expected slots=N"),
        ("node0\n# c\nnode0 slots=1\n", "hosts:3: node0 is listed twice (also line 1)"),
        ("node0 gpus=1\n", "hosts:1: unknown 'gpus=1'"),
        ("# nothing\n\n", "hosts: names no host"),
    ]:
        hosts.write_text(text)
        res = cfg.mntui(path, "nodes")
        assert res.returncode == 2 and said in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        assert "(nodes.hostfile of " in res.stderr
    hosts.unlink()
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 2 and "nodes.hostfile: cannot read hostfile" in res.stderr


# ---- the one-host Slurm ------------------------------------------------------------


def slurm_job(job: str, source: str, node: str) -> str:
    """A light job on the allocation's node, run there as a local node (it is this host)."""
    return f"""
    job: {job}
    nodes: {{slurm: {source}}}
    nproc_per_node: 2
    overrides: {{{node}: {{host: localhost}}, g999: {{host: elsewhere}}}}
    command: echo "up {{node}} {{nproc_per_node}}"; exec sleep 300
    launch: {{ready: log, ready_pattern: "^up ", ready_timeout: 20}}
    kill: {{grace: 2}}
    """


def test_slurm_allocation_is_read_launched_and_recorded(
    slurm: OneHostSlurm, cfg: Cfg, tmp_path: Path
) -> None:
    job_id = slurm.sbatch("--wrap", "sleep 300")
    slurm.wait_state(job_id, "RUNNING")
    job = "tslurm"
    path = cfg.write(slurm_job(job, job_id, slurm.node))
    listed = nodes_json(cfg, path, env=slurm.env)
    assert [(n["node"], n["host"], n["nproc"]) for n in listed["nodes"]] == [
        (slurm.node, "localhost", 2)
    ]
    assert listed["source"] == {
        "kind": "slurm",
        "spec": f"slurm {job_id}",
        "detail": f"Slurm job {job_id}, NodeList {slurm.node}",
    }
    res = cfg.mntui(path, "launch", "--no-ui", env=slurm.env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert tagged(job, slurm.node)
    record = latest(job)
    assert record is not None and record.node_source is not None
    assert record.node_source["spec"] == f"slurm {job_id}"

    # The allocation ends under the live run: status and kill still reach its node.
    assert slurm.run("scancel", job_id).returncode == 0
    slurm.wait_state(job_id, "CANCELLED")
    listed = nodes_json(cfg, path, env=slurm.env)
    assert [n["node"] for n in listed["nodes"]] == [slurm.node]
    assert listed["source"]["recorded_by_run"] == record.run_id
    assert f"Slurm job {job_id} is CANCELLED" in listed["source"]["why"]
    status = json.loads(cfg.mntui(path, "status", "--json", env=slurm.env).stdout)
    assert [n["state"] for n in status["nodes"]] == ["running"]
    refused = cfg.mntui(path, "launch", "--no-ui", env=slurm.env)
    assert refused.returncode == 1 and f"Slurm job {job_id} is CANCELLED" in refused.stderr
    killed = cfg.mntui(path, "kill", env=slurm.env)
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert tagged(job, slurm.node) == []

    # A job that never ran here has no record to fall back on: one line, exit 2.
    other = cfg.write(slurm_job("tslurm-new", job_id, slurm.node), name="new.yaml")
    res = cfg.mntui(other, "nodes", env=slurm.env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert re.search(rf"new.yaml:2 nodes.slurm: Slurm job {job_id} is CANCELLED", res.stderr)


def test_slurm_auto_reads_the_allocation_it_runs_in(slurm: OneHostSlurm, cfg: Cfg) -> None:
    job_id = slurm.sbatch("--wrap", "sleep 300")
    slurm.wait_state(job_id, "RUNNING")
    path = cfg.write(slurm_job("tslurmauto", "auto", slurm.node))
    inside = {**slurm.env, "SLURM_JOB_ID": job_id, "SLURM_JOB_NODELIST": slurm.node}
    listed = nodes_json(cfg, path, env=inside)
    assert [n["node"] for n in listed["nodes"]] == [slurm.node]
    assert listed["source"]["detail"] == f"Slurm job {job_id} (SLURM_JOB_ID), NodeList {slurm.node}"
    res = cfg.mntui(path, "nodes", env=slurm.env)
    assert res.returncode == 2 and "reads SLURM_JOB_ID, and none is set" in res.stderr
    slurm.run("scancel", job_id)


def test_dead_missing_and_foreign_slurm_jobs_are_refused(slurm: OneHostSlurm, cfg: Cfg) -> None:
    done = slurm.sbatch("--wrap", "true")
    slurm.wait_state(done, "COMPLETED")
    theirs = slurm.sbatch("--wrap", "sleep 300", user="nobody")
    slurm.wait_state(theirs, "RUNNING")
    for job_id, said in [
        (done, f"Slurm job {done} is COMPLETED, not running"),
        ("987654", "no Slurm job 987654"),
        (theirs, f"Slurm job {theirs} belongs to nobody (uid 65534), not to you"),
    ]:
        path = cfg.write(slurm_job(f"tdead{job_id}", job_id, slurm.node), name=f"{job_id}.yaml")
        res = cfg.mntui(path, "launch", "--no-ui", env=slurm.env)
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"{job_id}.yaml:2 nodes.slurm: {said}" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    slurm.run("scancel", theirs)


@pytest.mark.parametrize(
    ("nodelist", "names", "by_scontrol"),
    [
        ("g[369-372,380]", ["g369", "g370", "g371", "g372", "g380"], True),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"], True),
        ("b,a[009-010]", ["b", "a009", "a010"], True),  # Slurm's order, not sorted
        # Slurm 22.05 says "Invalid hostlist" (on stderr, with exit 0): ClusterShell reads it.
        ("gpu-[01-03]-ib", ["gpu-01-ib", "gpu-02-ib", "gpu-03-ib"], False),
    ],
)
def test_node_lists_expand_through_scontrol(
    slurm: OneHostSlurm,
    monkeypatch: pytest.MonkeyPatch,
    nodelist: str,
    names: list[str],
    by_scontrol: bool,
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    assert (scontrol_hostnames(nodelist) is not None) is by_scontrol
    assert list(expand_nodelist(nodelist)) == names


def test_broken_node_lists_are_refused(
    slurm: OneHostSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    assert scontrol_hostnames("x[1-3") is None  # scontrol prints `x]` for it
    for bad in ("x[1-3", "g[1-100000]", ""):
        with pytest.raises(ValueError):
            expand_nodelist(bad)


def test_torchrun_ranks_follow_slots_that_differ(fake: FakeCluster, cfg: Cfg) -> None:
    """slots=2 and slots=1: torchrun's own rank math takes each node's {nproc_per_node},
    so the world is 3 and node1's one process is rank 2."""
    job = "tslots"
    (cfg.tmp / "hosts").write_text("node0 slots=2\nnode1 slots=1\n")
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), free_port(), "{hostfile: hosts}"))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(
        lambda: (
            "rank 2/3 up" in fake.node("node1").log(job)
            and all(f"rank {r}/3 up" in fake.node("node0").log(job) for r in (0, 1))
        ),
        90,
        what="3 ranks up",
    )
    assert "WORLD_SIZE=3" in fake.node("node0").log(job)
    assert cfg.mntui(path, "kill").returncode == 0
