"""What `status` (and the app, at its open) says happened since this machine last looked
(watch/fromcluster.away_lines), on a real board view and a real run record (issue 38:
"the job ran on, steps 50 → 52" of a job torn down; a gave-up chain's freeze teardown
left out behind the lines that followed it)."""

from __future__ import annotations

import json

from test_mirror import _record

from mntui.sessions.launch.board import BoardView
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch.fromcluster import away_lines

T0 = 1_800_000_000.0


def _view(step: int, events: list[tuple[float, str, dict[str, object]]], chain: str) -> BoardView:
    status = {"at": T0 + 100, "nodes": {"n0": {"step": step}, "n1": {"step": step}}}
    lines = tuple(
        json.dumps({"t": t, "kind": kind, "node": "n1", "data": data}) for t, kind, data in events
    )
    return BoardView(status, None, True, lines, chain={"status": chain, "attempts": []},
                     now=T0 + 100)  # fmt: skip


def _looked(run: str, job: str, step: int) -> RunRecord:
    """A first look at step `step` (10 s after T0), as `status` makes it."""
    rec = _record(job, run)
    away_lines(rec, _view(step, [], "running"), now=T0 + 10)
    return rec


def test_a_job_torn_down_since_did_not_run_on() -> None:
    rec = _looked("20261129-000000-aaaa", "away-torn", 50)
    decision = (T0 + 50, "decision", {"state": "frozen", "why": "stopped: pid 7"})
    said = away_lines(rec, _view(52, [decision], "ended"), now=T0 + 100)
    assert "the job went steps 50 → 52, then ended" in said[0], said
    assert "ran on" not in "\n".join(said)
    assert any("n1 frozen: stopped: pid 7: torn down" in line for line in said), said


def test_every_teardown_is_kept_among_the_lines_that_follow_it() -> None:
    rec = _looked("20261129-000000-bbbb", "away-kept", 10)
    events = [(T0 + 20, "decision", {"state": "frozen", "why": "stopped: pid 9"})]
    events += [(T0 + 30 + i, "disconnected", {"why": f"gone {i}"}) for i in range(12)]
    said = away_lines(rec, _view(12, events, "gave-up"), now=T0 + 100)
    assert any("n1 frozen: stopped: pid 9: torn down" in line for line in said), said
    assert len(said) == 1 + 8 and said[-1].endswith("gone 11"), said


def test_a_live_job_ran_on() -> None:
    rec = _looked("20261129-000000-cccc", "away-live", 5)
    said = away_lines(rec, _view(9, [], "running"), now=T0 + 100)
    assert said[0].endswith("the job ran on, steps 5 → 9"), said
