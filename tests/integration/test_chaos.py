"""The fault campaign, short (bench/chaos.py runs the full one): two faults drawn from a
fixed seed against the watch on the cluster, on real sshd nodes with a real torchrun
job, each checked for what mntui promises (nothing of the job left on any node, its
ports free, no sessions, every run record ended, the coordinator's decision naming the
node hit, no file changed outside the run dirs): the coordinator SIGKILLed (its main's
sentinel starts it again, nothing is decided, the job trains on), and a rank frozen
while this machine is cut off from every node (the cluster takes the job down, its
decision naming the node frozen). The checks themselves are shown failing in
tests/unit/test_chaos_checks.py. The campaign's faults of this machine's own watchdog
and supervisor went with them (issue 37)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEED = 37
KINDS = ("coordinator-death", "partition-freeze")


def campaign(
    tmp_path: Path, seed: int, kinds: tuple[str, ...], timeout: float
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "chaos.json"
    res = subprocess.run(
        [
            *(sys.executable, str(REPO / "bench" / "chaos.py"), "--seed", str(seed)),
            *("--faults", str(len(kinds)), "--kinds", ",".join(kinds), "--profiles", "cluster"),
            *("--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return res, out


@pytest.mark.timeout(320)
def test_a_short_fixed_seed_campaign_finds_no_violation(tmp_path: Path) -> None:
    res, out = campaign(tmp_path, SEED, KINDS, 300)
    report = res.stdout + res.stderr[-4000:]
    data = json.loads(out.read_text())
    faults = data["faults"]
    assert data["seed"] == SEED and sorted(f["plan"]["kind"] for f in faults) == sorted(KINDS)
    assert [f["error"] for f in faults] == [None] * len(KINDS), report  # the harness held
    assert all(f["runs"] >= 1 for f in faults) and "faults by kind:" in res.stdout
    assert res.returncode == 0 and "violations: 0" in res.stdout, report
