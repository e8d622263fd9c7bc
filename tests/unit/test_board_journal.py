"""What happened while this machine was away, from the coordinator's journal's end
(launch/board.py BoardView.journal_since): only the lines after the last look are
decoded, and none of them is missed."""

from __future__ import annotations

import json

from mntui.sessions.launch.boardparse import JOURNAL_SLACK, BoardView


def _view(lines: list[str]) -> BoardView:
    return BoardView(None, None, True, tuple(lines))


def test_the_lines_after_the_last_look_and_no_others() -> None:
    lines = ['"t": 3}', *(json.dumps({"t": t, "kind": "steps"}) for t in range(10, 20))]
    view = _view(lines)
    assert [j["t"] for j in view.journal_since(15)] == [16, 17, 18, 19]
    assert [j["t"] for j in view.journal_since(0)] == list(range(10, 20))  # the cut one: not ours
    assert view.journal_since(99) == ()
    assert [j["t"] for j in view.journal] == list(range(10, 20))


def test_a_line_out_of_order_within_the_slack_is_kept() -> None:
    """The main's sentinel appends a line of its own now and then (respawn.py)."""
    late = json.dumps({"t": 100.5, "kind": "respawn"})
    lines = [json.dumps({"t": 100.0}), late, json.dumps({"t": 100.2}), json.dumps({"t": 101.0})]
    assert [j["t"] for j in _view(lines).journal_since(100.1)] == [100.5, 100.2, 101.0]


def test_decoding_stops_past_the_slack() -> None:
    """Older lines than the look less the slack are never decoded: one that is no JSON
    there costs nothing and hides nothing."""
    old = 1000.0 - JOURNAL_SLACK - 1
    lines = ["{not json", json.dumps({"t": old}), json.dumps({"t": 1001.0})]
    assert [j["t"] for j in _view(lines).journal_since(1000.0)] == [1001.0]
    assert [j["t"] for j in _view(["\\u00e9", json.dumps({"t": 5})]).journal] == [5]


def test_the_look_back_stops_at_the_first_line_past_the_slack() -> None:
    """What makes it cheap: a line older than the look less the slack ends the decoding,
    even if a later line stands before it (a main's clock stepped back by more than the
    slack: documented). A line with no finite time is no line of ours."""
    lines = [json.dumps({"t": 1002.0}), json.dumps({"t": 900.0}), json.dumps({"t": 1001.0})]
    assert [j["t"] for j in _view(lines).journal_since(1000.0)] == [1001.0]
    assert [j["t"] for j in _view(lines).journal] == [1002.0, 900.0, 1001.0]
    inf = '{"t": -Infinity}'
    assert [j["t"] for j in _view([json.dumps({"t": 1003.0}), inf, json.dumps({"t": 1001.0})])
            .journal_since(1000.0)] == [1003.0, 1001.0]  # fmt: skip
