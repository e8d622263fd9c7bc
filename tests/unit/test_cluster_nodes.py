"""`status` of a run the cluster watches, from the node snapshots on its coordinator's
board (tui/cli/clusternodes.py, clusterstatus.py, launch/board.py): each row has every
key a polled run's row has, whatever the board holds (a good entry, none, a stale one,
a hostile one), and the table the columns a polled run's has, plus SENTINEL.

The board's text is made here, as the main's shell prints it; the whole path over real
sentinels is tests/integration/test_cluster_status_parity.py's.
"""

from __future__ import annotations

import base64
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from boardtext import board_text
from test_node_nodesnap import GOOD_NODE

from mntui.sessions.launch.board import board_script, parse_board
from mntui.sessions.poll.snapshot import NodeSnapshot, snapshot_dict
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
from mntui.tui.cli.clusternodes import STALE
from mntui.tui.cli.clusterstatus import board_status
from mntui.tui.cli.statusrows import HEAD

RUN = "20261125-101010-abcd"
NOW = 1_800_000_000
NODES = ("n0", "n1", "n2", "n3", "n4")
SNAPSHOT_KEYS = {f.name for f in fields(NodeSnapshot)} | {"state", "why"}
GOOD = {k: v for k, v in GOOD_NODE.items() if k != "age"} | {"at": NOW - 1.0}


def b64(d: object) -> str:
    raw = d if isinstance(d, bytes) else json.dumps(d).encode()
    return base64.b64encode(raw).decode()


def board(entries: object, connected: tuple[str, ...] = NODES) -> str:
    rows = {
        n: {"state": "running", "why": "1 process(es)", "connected": n in connected, "procs": 1,
            "output_age": 2.0, "exit_code": None, "step": 7, "rate": 1.5}
        for n in NODES
    }  # fmt: skip
    status = {"run": RUN, "at": NOW, "nodes": rows}
    nodes = entries if isinstance(entries, bytes) else {"at": NOW, "nodes": entries}
    return board_text({"status.json": status, "nodes.json": nodes}, now=NOW)


@pytest.fixture
def record(tmp_path: Path) -> RunRecord:
    nodes = [NodeRecord(n, "localhost", r, f"j-{n}", f"j/{RUN}/{n}", f".mntui/runs/j/{RUN}/{n}")
             for r, n in enumerate(NODES)]  # fmt: skip
    rec = RunRecord("j", RUN, "cfg.yaml", "localhost", 1, nodes)
    rec.status, rec.watch_port = RunStatus.RUNNING, 29501
    rec.create()
    return rec


def shown(record: RunRecord, text: str, as_json: bool) -> list[str]:
    said: list[str] = []

    def say(line: str = "", **_: object) -> None:
        said.extend(line.splitlines())

    assert board_status(record, parse_board(text), as_json, say, 2, 0) is not None
    return said


def rows(record: RunRecord, text: str) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads("\n".join(shown(record, text, True)))
    return data["nodes"]  # type: ignore[no-any-return]


def test_each_row_has_every_key_of_a_polled_rows_whatever_the_board_holds(
    record: RunRecord,
) -> None:
    hostile = {**GOOD, "procs": [{**GOOD["procs"][0], "cmdline": "\x1b]52;c;ZXZpbA==\x07"}]}
    entries = {
        "n0": GOOD,
        "n1": {**GOOD, "at": NOW - STALE - 5},  # its sentinel went quiet
        "n2": hostile,
        # n3: none yet; n4's sentinel is gone
        "n4": GOOD,
    }
    got = rows(record, board(entries, connected=("n0", "n1", "n2", "n3")))
    for r in got:
        assert r.keys() >= SNAPSHOT_KEYS, SNAPSHOT_KEYS - r.keys()
        assert {"connected", "step", "steps_per_second", "live_procs", "snapshot_age"} <= r.keys()
        assert r["output_age"] == 2.0 and r["step"] == 7 and r["live_procs"] == 1  # as before
    n0, n1, n2, n3, n4 = got
    assert n0["procs"] == GOOD["procs"] and n0["ports"] == [29500] and n0["error"] is None
    assert (n0["reachable"], n0["ncpu"], n0["load"], n0["snapshot_age"]) == (
        True, 8, [0.5, 0.2, 0.1], 1.0,
    )  # fmt: skip
    for r in (n1, n2, n3):  # unknown: nothing made up, reachable from the connection
        assert (r["procs"], r["ports"], r["load"], r["ncpu"], r["snapshot_age"]) == (
            [], [], None, None, None,
        )  # fmt: skip
        assert r["reachable"] is True and r["error"] == "no fresh snapshot from its sentinel"
    assert n4["reachable"] is False and n4["procs"] == GOOD["procs"]  # fresh, its link cut
    assert not [p for r in got for p in r["procs"] if "\x1b" in p["cmdline"]]
    assert any("1 malformed" in line for line in shown(record, board(entries), False))


@pytest.mark.parametrize(
    "nodes",
    [
        b'{"at": 1, "nodes": {"n0": ',  # cut at BOARD_MAX
        b"[1, 2]",
        json.dumps({"at": NOW, "nodes": {"n0": {**GOOD, "ports": [70000]}}}).encode(),
        json.dumps({"at": NOW, "nodes": {"n0": {**GOOD, "procs": [{"pid": 1}]}}}).encode(),
        json.dumps({"at": NOW, "nodes": {"n0": {**GOOD, "mem_total_mib": "1"}}}).encode(),
        json.dumps({"at": NOW, "nodes": {"n0": {**GOOD, "at": None}}}).encode(),
        json.dumps({"at": NOW, "nodes": {"n0": {**GOOD, "log_size": -1}}}).encode(),
    ],
)
def test_a_hostile_board_is_counted_and_never_believed(record: RunRecord, nodes: bytes) -> None:
    view = parse_board(board(nodes))
    assert view.nodes == {} and view.nodes_malformed == 1 and view.status is not None
    n0 = rows(record, board(nodes))[0]
    assert n0.keys() >= SNAPSHOT_KEYS and n0["procs"] == [] and n0["ports"] == []


def test_an_entry_the_check_passes_is_decoded_into_the_very_snapshot(record: RunRecord) -> None:
    n0 = rows(record, board({"n0": GOOD}))[0]
    snap = NodeSnapshot(
        "n0", 0, n0["at"], True, rtt=None, procs=(), gpu=None, output_age=2.0, **{
            k: GOOD[k] for k in ("session", "pane_dead", "pane_pid", "exit_code", "log_size",
                                 "ncpu", "mem_total_mib", "mem_available_mib", "node_time",
                                 "malformed")
        },
    )  # fmt: skip
    want = {**snapshot_dict(snap, "running", "1 process(es)"), "procs": GOOD["procs"]}
    assert {k: n0[k] for k in want} == {**want, "ports": [29500], "load": [0.5, 0.2, 0.1]}


def test_the_table_has_a_polled_runs_columns_and_the_sentinels(record: RunRecord) -> None:
    text = shown(record, board({"n0": GOOD}, connected=("n0",)), False)
    head = next(line.split() for line in text if line.startswith("NODE"))
    assert head == [*HEAD, "SENTINEL", "DETAIL"]
    n0 = next(line.split() for line in text if line.startswith("n0 "))
    n1 = next(line.split() for line in text if line.startswith("n1 "))
    assert n0[:3] == ["n0", "0", "running"] and "29500" in n0 and "connected" in n0
    assert "7" in n0 and n0[n0.index("connected") - 1] == "-"  # no rtt without a read
    assert (n1[4], n1[5], n1[10]) == ("1", "-", "gone")  # PROCS: the coordinator's count


def test_a_status_asks_for_the_snapshots_and_a_launchs_wait_does_not() -> None:
    assert "nodes.json" in board_script(".mntui/runs/j/r/n0", gpus=True)
    assert "nodes.json" not in board_script(".mntui/runs/j/r/n0")


def test_the_wire_shape_is_the_snapshots_own() -> None:
    """nodewire (stdlib, on the nodes) names the fields of NodeSnapshot and JobProc: the
    manager builds them from a checked entry by these names."""
    from mntui.sessions.node.wire import nodewire
    from mntui.sessions.poll.snapshot import JobProc

    own = {"node", "rank", "at", "reachable", "error", "rtt", "gpu", "new_output"}
    assert {f.name for f in fields(NodeSnapshot)} - own == nodewire.KEYS
    assert tuple(f.name for f in fields(JobProc)) == nodewire.PROC_KEYS
