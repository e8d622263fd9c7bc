"""The hang campaign, short (bench/hangs.py runs the full one): three hangs drawn from a
fixed seed on real sshd nodes with real torchrun, each of which the cluster's report
must pin on the right rank and node: a rank asleep in data loading (the stacks say it is
not in a collective), a rank in a barrier while the other all-reduces (two ranks: the tie
is settled by the Flight Recorder's history), and a SIGSTOPped rank. About 40 s here.
And `mntui report` on a job that hangs now, with no teardown."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakecluster import FakeCluster, free_port, tagged, wait_for
from helpers import Cfg

REPO = Path(__file__).resolve().parents[2]
SEED = 20
KINDS = ("sleep", "barrier", "sigstop")

pytestmark = pytest.mark.timeout(240)


def test_a_short_fixed_seed_campaign_names_every_culprit(tmp_path: Path) -> None:
    out = tmp_path / "hangs.json"
    res = subprocess.run(
        [
            *(sys.executable, str(REPO / "bench" / "hangs.py"), "--seed", str(SEED)),
            *("--hangs", "3", "--kinds", ",".join(KINDS), "--nodes", "2"),
            *("--auto-share", "0", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=220,
    )
    report = res.stdout + res.stderr[-4000:]
    hangs = json.loads(out.read_text())["hangs"]
    assert sorted(h["plan"]["kind"] for h in hangs) == sorted(KINDS), report
    assert [h["error"] for h in hangs] == [None] * 3, report
    assert all(h["named"] for h in hangs), report
    # The evidence is saved within 2 s of the decision (the goal of issue 20): the
    # sentinels' stacks, taken before the kill.
    assert all(h["report_s"] is not None and h["report_s"] <= 2.0 for h in hangs), report
    first = {h["plan"]["kind"]: h["headline"] for h in hangs}
    assert "is not in a collective: in `next_batch`" in first["sleep"], report
    assert "in a different collective: `barrier`" in first["barrier"], report
    assert "is stopped (state T)" in first["sigstop"], report
    assert res.returncode == 0 and "culprit named right in 3/3" in res.stdout, report


def test_report_on_a_live_hung_job_leads_with_the_culprit_and_kills_nothing(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """`mntui report` while the job hangs (on_stall: notify, so nothing tears it down):
    over its own connections, the stacks and the Flight Recorder dumps asked for now."""
    work = cfg.tmp / "work"
    work.mkdir()
    shutil.copy(REPO / "tests" / "jobs" / "hang_train.py", work / "hang_train.py")
    path = cfg.write(f"""
    job: hlive
    nodes: [node0, node1]
    workdir: {work}
    master_port: {free_port()}
    env: {{OMP_NUM_THREADS: "1"}}
    command: >-
      exec python3 -m torch.distributed.run --nnodes={{nnodes}} --node_rank={{node_rank}}
      --nproc_per_node=1 --master_addr={{master_addr}} --master_port={{master_port}}
      hang_train.py --interval 0.2 --hang-rank 1 --hang-step 6 --how lock
    launch: {{ready_timeout: 90}}
    kill: {{grace: 2}}
    watch: {{stall_after: 600}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    wait_for(lambda: "hang: lock" in fake.node("node1").log("hlive"), 90, what="the hang")

    def hung_report() -> dict[str, Any] | None:
        """A report once rank 0 has entered the collective rank 1 never reaches."""
        res = cfg.mntui(path, "report", "--json")
        assert res.returncode == 0, res.stderr
        report: dict[str, Any] = json.loads(res.stdout)
        return report if any("never entered" in line for line in report["flight"]) else None

    report = wait_for(hung_report, 60, interval=0.5, what="a report with the FR's verdict")
    assert isinstance(report, dict)
    assert report["headline"].startswith(
        "rank 1 (node1) is not in a collective: in `load_shard` (hang_train.py:"
    ), report["headline"]
    assert [(c["ranks"], c["nodes"]) for c in report["culprits"]] == [([1], ["node1"])]
    assert any("rank 1 (node1) never entered it" in line for line in report["flight"]), report
    assert len(tagged("hlive")) >= 4  # both torchruns and both ranks still there
