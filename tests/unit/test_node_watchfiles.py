"""What the coordinator reads from a sentinel and what a sentinel reads from its watch
file: strict, bounded, and never a guess (a frame of the wrong shape is counted and
dropped; a watch file of another shape stops the sentinel in one line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from boardtext import board_text

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch.board import parse_board
from mntui.sessions.launch.clusterwatch import watch_config
from mntui.sessions.node.board.coordstate import Board, Peer
from mntui.sessions.node.wire.facts import Malformed, from_wire
from mntui.sessions.node.wire.watchcfg import BadWatchFile, parse, to_json

GOOD = {
    "procs": [[10, 1, "S"], [11, 10, "T"]],
    "pane_pid": 10,
    "exit_code": None,
    "session": True,
    "pane_dead": False,
    "log_size": 120,
    "output_age": 0.5,
}


def _cfg(extra: str = ""):  # type: ignore[no-untyped-def]
    text = f"job: j\nnodes: [n0, n1]\ncommand: x\nwatch: {{where: cluster}}\n{extra}"
    cfg = parse_config(text)
    return watch_config(cfg, "20261125-101010-abcd", "n1", "j/20261125-101010-abcd/n1",
                        "j-n1", ("n0", "n1"), "10.0.0.1",
                        "0123456789abcdef" if "restart" in extra else None)  # fmt: skip


def test_good_facts_are_read() -> None:
    f = from_wire(GOOD)
    assert [p.state for p in f.live_procs] == ["S", "T"] and f.reachable and f.log_size == 120


@pytest.mark.parametrize(
    "bad",
    [
        {**GOOD, "procs": [[10, 1, "SS"]]},
        {**GOOD, "procs": [[10, 1, "\x1b"]]},
        {**GOOD, "procs": [["10", 1, "S"]]},
        {**GOOD, "procs": [[True, 1, "S"]]},
        {**GOOD, "procs": [[0, 1, "S"]]},
        {**GOOD, "procs": [[10, 1, "S"]] * 5000},
        {**GOOD, "session": 1},
        {**GOOD, "exit_code": 1.5},
        {**GOOD, "log_size": -1},
        {**GOOD, "output_age": "1"},
        {**GOOD, "pane_pid": 2**40},
        [GOOD],
    ],
)
def test_facts_of_another_shape_are_malformed(bad: Any) -> None:
    with pytest.raises(Malformed):
        from_wire(bad)


class _Channel:
    def __init__(self, pid: object = None) -> None:
        self.peer = {"node": "n1", "pid": pid}

    def close(self) -> None:
        pass


def _journal(board: Board) -> list[tuple[str, Any, dict[str, Any]]]:
    lines = Path(board.out, "journal.jsonl").read_text().splitlines()
    return [(e["kind"], e["node"], e["data"]) for e in map(json.loads, lines)]


def test_a_workers_sentinel_that_says_hello_with_a_new_pid_was_started_again(
    tmp_path: Path,
) -> None:
    """Its guard (node/sentinel/guard.py) cannot write the main's journal: the coordinator says
    it, once, when the new sentinel says hello. A reconnect of the same sentinel is no
    respawn, the main's respawns are its keeper's to journal, a pid of no shape none."""
    board = Board(_cfg(), str(tmp_path / "coord"))
    for node, pid in (("n1", 41), ("n1", 41), ("n1", 57), ("n1", True), ("n0", 7), ("n0", 8)):
        board.connected(node, _Channel(pid))  # type: ignore[arg-type]
    respawns = [(n, d) for k, n, d in _journal(board) if k == "respawn"]
    assert respawns == [("n1", {"who": "sentinel", "pid_was": 41, "pid": 57, "by": "guard"})]


def test_the_board_counts_a_malformed_snapshot_and_keeps_the_last_good_one(
    tmp_path: Path,
) -> None:
    wc = _cfg()
    board = Board(wc, str(tmp_path / "coord"))
    peer = Peer("n1", _Channel())  # type: ignore[arg-type]
    good = {"k": "snap", "run": wc.run, "age": 0.1, "facts": GOOD, "steps": {"step": 3}}
    board.heard(peer, good)
    board.heard(peer, {**good, "facts": {**GOOD, "procs": "all"}})
    board.heard(peer, {**good, "age": float("nan")})
    board.heard(peer, {**good, "run": "another-attempt", "facts": {**GOOD, "procs": []}})
    assert board.malformed == 2
    facts, _ = board.facts(board.words["n1"].arrival)
    assert len(facts["n1"].live_procs) == 2  # the good one; another attempt's is ignored


def test_a_watch_file_round_trips_and_restarts_ride_along() -> None:
    wc = _cfg("restart: {max: 2, backoff: 1}\n")
    back = parse(json.loads(to_json(wc)))
    assert back == wc and back.restart is not None and back.restart.max == 2
    assert back.attempt_nonce is not None and back.ready == "port"


@pytest.mark.parametrize(
    ("change", "word"),
    [
        ({"v": 2}, "version 1"),
        ({"nodes": ["n0", "n 1"]}, "nodes"),
        ({"ports": [0]}, "ports"),
        ({"tag": "j/../n1"}, "tag"),
        ({"coord_port": "29501"}, "coord_port"),
        ({"progress_pattern": "step (?P<x>\\d+)"}, "group `step`"),
        ({"restart": {"max": 2}}, "restart.on"),
        ({"attempt_nonce": "$(reboot)"}, "attempt_nonce"),
        ({"restart_base": -1}, "restart_base"),
        ({"ready": "soon"}, "ready"),
        ({"ready": "log", "ready_pattern": None}, "ready_pattern"),
        ({"ready": "log", "ready_pattern": "a\0b"}, "ready_pattern"),
        ({"ready_delay": -1}, "ready_delay"),
    ],
)
def test_a_watch_file_of_another_shape_is_refused_in_one_line(
    change: dict[str, Any], word: str
) -> None:
    data = {**json.loads(to_json(_cfg())), **change}
    with pytest.raises(BadWatchFile, match=word.replace("(", "\\(")):
        parse(data)


def test_the_board_a_node_sends_back_is_read_strictly() -> None:
    journal = b'{"t": 1, "kind": "steps"}\n{"t": 2, "ki' + b"\n" + b'[1]\n{"t": "x"}\n'
    files = {
        "status.json": {"nodes": {}},
        "decision.json": [1, 2],
        "chain.json": {"attempts": []},
        "journal.jsonl": journal,
        "straggler.json": b'{"v": 1}\n==> chain.json <==\n{"forged": 1}',
    }
    view = parse_board(board_text(files))
    assert view.status == {"nodes": {}} and view.decision is None and view.alive
    assert view.chain is None and view.straggler is None  # a forged header spoils both
    assert view.journal == ()  # and all after them
    view = parse_board(board_text({**files, "straggler.json": None}))
    assert view.chain == {"attempts": []}
    assert [j["t"] for j in view.journal] == [1]
    # a header seen twice spoils its file and every one after it, the journal too
    forged = {**files, "straggler.json": b'{"v": 1}\n==> notify.json <==\n{"forged": 1}'}
    view = parse_board(board_text({**forged, "notify.json": {"sent": []}}))
    assert view.notify is None and view.journal == () and view.status == {"nodes": {}}
    # a line too many likewise
    view = parse_board(board_text({**files, "straggler.json": b'{"v": 1}\n{"v": 2}'}))
    assert view.straggler is None and view.journal == ()
    # bytes that are no UTF-8, and text that is not ASCII: not the coordinator's
    view = parse_board(board_text({**files, "straggler.json": None, "status.json": b'{"a": "\xff"}',
                                   "chain.json": '{"a": "\u00e9"}'.encode()}))  # fmt: skip
    assert view.status is None and view.chain is None
    # written by hand: what no script of ours prints
    text = "\n".join([
        "ALIVE yes",
        "==> status.json <==", '{"nodes": {}}', '{"second": "line"}',
        "==> bogus.json <==", "{}",
        "==> decision.json <==", "{}", "==> decision.json <==", "{}",
        "NOW 12",
    ])  # fmt: skip
    view = parse_board(text)
    assert view.status is None and view.decision is None and view.alive and view.now is None
