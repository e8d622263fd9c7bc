"""The fault campaign, short (bench/chaos.py runs the full one): three faults drawn from a
fixed seed, on real sshd nodes with a real torchrun job, each checked for what mntui
promises (nothing of the job left on any node, its port free, no sessions, every run
record ended, no restart after a kill, a dead supervisor shown by `mntui status`, no file
changed outside the run dirs). Seed 2 draws: a node's tmux server killed (no restart: the
self-failure must close every session, finding 11), `mntui kill node1` in a restart chain
(never restarted, finding 3), and the supervisor SIGKILLed mid-relaunch, then `mntui
status` (must say so) and `mntui watch` (must resume the chain). On the tree before
issue 18's fixes (1c70260) this run finds 4 violations (sessions, restart, orphan-line,
resume). About a minute here; the checks themselves are shown failing in
tests/unit/test_chaos_checks.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEED = 2
KINDS = ("supervisor-kill", "tmux-kill", "partial-kill")

pytestmark = pytest.mark.timeout(240)


def test_a_short_fixed_seed_campaign_finds_no_violation(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    res = subprocess.run(
        [
            *(sys.executable, str(REPO / "bench" / "chaos.py"), "--seed", str(SEED)),
            *("--faults", "3", "--kinds", ",".join(KINDS), "--profiles", "plain,restart"),
            *("--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=220,
    )
    report = res.stdout + res.stderr[-4000:]
    data = json.loads(out.read_text())
    faults = data["faults"]
    assert data["seed"] == SEED and sorted(f["plan"]["kind"] for f in faults) == sorted(KINDS)
    assert [f["error"] for f in faults] == [None] * 3, report  # the harness itself held
    assert all(f["runs"] >= 1 for f in faults) and "faults by kind:" in res.stdout
    assert res.returncode == 0 and "violations: 0" in res.stdout, report
