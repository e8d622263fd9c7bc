"""The chaos campaign's checks of a watcher's death on the main (bench/chaos_cluster.py
`coordinator-death`, `main-sentinel-death`): each one fails on what it must catch (a
checker that cannot fail proves nothing) and passes on a good outcome."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos_checks import check_journal_respawn, check_not_lost, check_respawned


def test_a_watcher_not_started_again_or_too_late_is_a_violation() -> None:
    assert check_respawned("coordinator", 10, 11, 0.2, 5.0) == []
    assert check_respawned("coordinator", 10, None, None, 5.0)[0].invariant == "respawn"
    assert check_respawned("coordinator", 10, 10, 0.2, 5.0), "the dead pid is not a new one"
    late = check_respawned("sentinel", 10, 11, 7.5, 5.0)
    assert late and "after 7.5s" in late[0].detail


def test_a_sentinel_that_called_its_coordinator_lost_is_a_violation() -> None:
    assert check_not_lost({"node0": None, "node1": None}, "x") == []
    found = check_not_lost({"node0": None, "node1": {"why": "no word\x1b[2J"}}, "x")
    assert [(v.node, v.invariant) for v in found] == [("node1", "lost")]
    assert "\x1b" not in found[0].detail


def test_the_journal_must_say_who_was_started_again_as_which_pid() -> None:
    line = {"kind": "respawn", "node": "node0", "data": {"who": "coordinator", "pid": 11}}
    assert check_journal_respawn([line], "coordinator", 11) == []
    assert check_journal_respawn([line], "coordinator", None) == []
    assert check_journal_respawn([line], "sentinel", 11)
    assert check_journal_respawn([line], "coordinator", 12)
    assert check_journal_respawn([{"kind": "respawn", "data": "x"}], "coordinator", None)
    assert check_journal_respawn([], "coordinator", 11)[0].invariant == "journal"
