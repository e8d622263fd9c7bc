"""The fault campaign, short (bench/chaos.py runs the full one): two faults drawn from a
fixed seed, on real sshd nodes with a real torchrun job, each checked for what mntui
promises (nothing of the job left on any node, its port free, no sessions, every run
record ended, no restart after a kill, a dead supervisor shown by `mntui status`, no file
changed outside the run dirs). Seed 37 draws: node0's tmux server killed (no restart: the
self-failure must close every session, finding 11), and the supervisor SIGKILLed
mid-relaunch, then `mntui status` (must say so) and `mntui watch` (must resume the chain).
The suite once ran seed 2, which also drew `mntui kill node1` in a restart chain (never
restarted, finding 3): that fault is
tests/integration/test_recovery.py::test_a_users_partial_kill_is_not_restarted_nor_blamed
on every run, so the campaign here no longer spends ~15 s on it; the full campaigns still
draw it, and so does `bench/chaos.py --seed 2 --faults 3 --kinds
supervisor-kill,tmux-kill,partial-kill --profiles plain,restart`. On the tree before
issue 18's fixes (1c70260) seed 2 found 4 violations (sessions, restart, orphan-line,
resume). About 35 s here (every backoff of a chain as long as its first, 2 s in the
relaunch fault); the checks themselves are shown failing in tests/unit/test_chaos_checks.py.

Between two attempts (issue 28), seed 5 draws: `mntui kill` while the supervisor is held
between the teardown and its `restarting` mark (the chain must end: no mark, no attempt
after the kill's note), and node1 quarantined by the user in the backoff (attempt 1 runs
on the spare; its worker there SIGSTOPped, attempt 1's teardown must kill on node0 and
the spare, nothing of it left). On the tree before issue 28's fixes (015629e) this run
finds 9 violations in 90 s: the kill found "the job is not running" and left no mark, and
attempt 1 was relaunched 4.8 s after it (kill, restart, and its leftovers); attempt 1's
watchdog watched the quarantined node1 instead of the spare and its supervisor died
(KeyError: 'node2'). About a minute here (50 to 60 s; the supervisor is held at most 5 s,
a kill being done in about one unless the supervisor was stopped holding the run's lock)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEED = 37  # draws tmux-kill (plain, node0) and supervisor-kill (restart, relaunch, resume)
KINDS = ("supervisor-kill", "tmux-kill")

BETWEEN_SEED = 5
BETWEEN = ("fail-kill", "quarantine")


def campaign(
    tmp_path: Path, seed: int, kinds: tuple[str, ...], profiles: str, timeout: float
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "chaos.json"
    res = subprocess.run(
        [
            *(sys.executable, str(REPO / "bench" / "chaos.py"), "--seed", str(seed)),
            *("--faults", str(len(kinds)), "--kinds", ",".join(kinds), "--profiles", profiles),
            *("--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return res, out


@pytest.mark.timeout(240)
def test_a_short_fixed_seed_campaign_finds_no_violation(tmp_path: Path) -> None:
    res, out = campaign(tmp_path, SEED, KINDS, "plain,restart", 220)
    report = res.stdout + res.stderr[-4000:]
    data = json.loads(out.read_text())
    faults = data["faults"]
    assert data["seed"] == SEED and sorted(f["plan"]["kind"] for f in faults) == sorted(KINDS)
    drawn = sorted((f["plan"]["kind"], f["plan"]["moment"], f["plan"]["then"]) for f in faults)
    assert drawn == [("supervisor-kill", "relaunch", "resume"), ("tmux-kill", "", "")], drawn
    assert [f["error"] for f in faults] == [None] * len(KINDS), report  # the harness held
    assert all(f["runs"] >= 1 for f in faults) and "faults by kind:" in res.stdout
    assert res.returncode == 0 and "violations: 0" in res.stdout, report


@pytest.mark.timeout(420)
def test_a_kill_after_the_failure_and_a_quarantine_between_attempts(tmp_path: Path) -> None:
    res, out = campaign(tmp_path, BETWEEN_SEED, BETWEEN, "restart", 400)
    report = res.stdout + res.stderr[-4000:]
    faults = json.loads(out.read_text())["faults"]
    drawn = sorted((f["plan"]["kind"], f["plan"]["moment"]) for f in faults)
    assert drawn == [("fail-kill", "torn-down"), ("quarantine", "user")], drawn
    assert [f["error"] for f in faults] == [None] * 2, report
    notes = [n for f in faults for n in f["notes"]]
    # where the kill landed (in the window or, on a loaded machine, just after it in the
    # backoff) is said, and either way the chain must end: the window itself is hit every
    # time by tests/integration/test_chain_kill_window.py and tests/unit/test_chain_kills.py
    assert any("kill noted" in n for n in notes), report
    assert any("SIGSTOP worker" in n and "on node2" in n for n in notes), report  # the spare
    assert res.returncode == 0 and "violations: 0" in res.stdout, report
