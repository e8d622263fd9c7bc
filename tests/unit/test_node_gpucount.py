"""The GPUs a job held (node/rules/gpucount.py): one rule for the manager's watchdog (its step
clock) and the cluster's coordinator, so a run's GPU-hours do not depend on where it was
watched. The coordinator counts from the sentinels' readings: data, counted and never
trusted (a failed, hostile or out-of-place reading says nothing; it never adds a GPU)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from test_history import run_id
from test_node_watchfiles import GOOD, _Channel

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.history.stepclock import coordinator_clock as _steps_of
from mntui.sessions.history.stepclock import note_plain as _note_steps
from mntui.sessions.launch.clusterwatch import watch_config
from mntui.sessions.node.board.coordstate import Board, Peer
from mntui.sessions.node.rules import gpucount
from mntui.sessions.node.rules.gpucount import held_of, listed, listed_in, see, split_table
from mntui.sessions.node.wire.watchcfg import BadWatchFile, WatchConfig, parse, to_json
from mntui.sessions.poll.gpu import parse_reading
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch.clusterchain import STEPS_EVERY, _steps_due

SMI = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
RUN = "20261125-101010-abcd"


def recorded(name: str) -> str:
    text = (SMI / name).read_text()
    return "".join(line for line in text.splitlines(True) if not line.startswith("#"))


H100X8, SMALL, OFF_BUS = (
    recorded("h100x8.gpu.csv"),
    recorded("small6g.gpu.csv"),
    recorded("fell-off-bus.txt"),
)
HEADER = "index, uuid, name\n"

READINGS = {  # csv (None: no nvidia-smi), apps -> GPUs listed (None: unknown)
    "h100x8": (H100X8, "", 8),
    "a GPU off the bus, one still listed": (OFF_BUS + SMALL, "", 1),
    "only the driver's error": (OFF_BUS, "", None),
    "our timeout line, nothing read": ("mntui: nvidia-smi did not answer within 10 s\n", "", None),
    "no nvidia-smi": (None, "", 0),
    "nvidia-smi lists none": (HEADER, "", 0),
    "no GPU row, the apps answer failed": (HEADER, "Failed to initialize NVML\n", None),
    "empty": ("", "", 0),
    "one column: no header, so no rows": ("index\n0\n", "", None),
    "rows before a header are no GPUs": ("0, a, b\n" + HEADER, "", None),
    "rows of another width": (HEADER + "0, a\n1, b, c, d\n", "", None),
    "NUL and controls": (HEADER + "0, a\x00, b\n1, \x1b[2J, c\n", "", 1),
    "a quote left open": (HEADER + '0, "a, b\n', "", None),
    "a second header is a row": (HEADER + HEADER, "", 1),
}


@pytest.mark.parametrize("name", sorted(READINGS))
def test_a_readings_gpus_are_its_table_rows_and_the_watchdog_counts_alike(name: str) -> None:
    csv, apps, want = READINGS[name]
    assert listed_in(csv, apps) == want
    polled = parse_reading(csv, apps) if csv is not None else None  # the poller's reading
    here = listed(len(polled.gpus), bool(polled.errors)) if polled else listed(None, False)
    assert here == want  # the watchdog's count of the same text


def test_the_table_rule_is_the_pollers_and_never_raises() -> None:
    header, rows, errors = split_table("junk\n" + H100X8 + "x" * 5000 + "\n\x00\n")
    assert header is not None and len(rows) == 8 and len(errors) == 3
    assert all(len(r) == len(header) for r in rows)


@pytest.mark.parametrize(
    ("nproc", "counts", "held"),
    [
        (4, [8], 4),  # 4 processes on an 8-GPU node hold 4
        (None, [2], 2),  # an older record: no nproc, all listed
        (2, [None], None),  # nvidia-smi failed: not seen
        (4, [0], 0),  # no nvidia-smi, or none listed: a CPU node holds none
        (4, [4, 0, None, 1], 4),  # a GPU fell off the bus: it was held all the same
        (8, [-3, 10**9], 8),
        (None, [10**9], gpucount.MAX_HELD),
    ],
)
def test_the_most_a_node_was_seen_holding_counts(
    nproc: int | None, counts: list[int | None], held: int | None
) -> None:
    got: dict[str, int] = {}
    for c in counts:
        see(got, "n", nproc, c)
    assert got.get("n") == held


def test_a_held_map_read_back_keeps_only_counts_of_names() -> None:
    back = held_of({"n0": 4, "n1": -1, "n2": True, "n3": "4", "x" * 200: 1, "n4": 2**40})
    assert back == {"n0": 4} and held_of([["n0", 4]]) == {}


def _cfg(nproc: int = 4) -> WatchConfig:
    text = (
        f"job: j\nnodes: [n0, n1]\ncommand: x\nnproc_per_node: {nproc}\nwatch: {{where: cluster}}\n"
    )
    return watch_config(parse_config(text), RUN, "n0", f"j/{RUN}/n0", "j-n0", ("n0", "n1"),
                        "10.0.0.1", None)  # fmt: skip


def test_the_watch_file_carries_each_nodes_processes_and_refuses_other_counts() -> None:
    wc = _cfg(4)
    assert wc.nprocs == (4, 4) and parse(json.loads(to_json(wc))) == wc
    assert wc.nproc("n1") == 4 and wc.nproc("elsewhere") is None
    old = {k: v for k, v in json.loads(to_json(wc)).items() if k != "nprocs"}
    assert parse(old).nproc("n1") is None  # an older launch's file: held = listed
    for bad in ([4], [4, 0], [4, "4"], [4, True], 4):
        with pytest.raises(BadWatchFile, match="nprocs"):
            parse({**json.loads(to_json(wc)), "nprocs": bad})


def _snap(wc: WatchConfig, gpu: Any, run: str | None = None, step: int = 3) -> dict[str, Any]:
    snap = {"k": "snap", "run": run or wc.run, "age": 0.1, "facts": GOOD, "steps": {"step": step}}
    return {**snap, "gpu": gpu} if gpu is not ... else snap


def _gpu(csv: str | None, apps: str = "") -> dict[str, Any]:
    return {"csv": csv, "apps": apps, "own": [10, 11], "age": 0.2}


def test_the_coordinator_counts_each_nodes_gpus_into_the_attempts_clock(tmp_path: Path) -> None:
    wc = _cfg(4)
    board = Board(wc, str(tmp_path / "coord"))
    n0, n1 = Peer("n0", _Channel()), Peer("n1", _Channel())  # type: ignore[arg-type]
    board.heard(n0, _snap(wc, _gpu(H100X8)))
    assert (board.clock["gpus"], board.clock["gpu_nodes"]) == (4, 1)  # one per process
    board.heard(n1, _snap(wc, _gpu(OFF_BUS)))  # the driver failed: unknown, not 0
    assert board.clock["gpu_nodes"] == 1
    board.heard(n1, _snap(wc, _gpu(OFF_BUS + SMALL), step=4))
    board.heard(n0, _snap(wc, _gpu(OFF_BUS), step=5))  # a later failure keeps what was held
    board.heard(n0, _snap(wc, ...))  # no reading: unchanged since sent
    assert (board.clock["gpus"], board.clock["gpu_nodes"]) == (5, 2)
    assert board.clock["first_step"] == 3 and board.clock["last_step"] == 5
    board.publish({}, time.monotonic(), force=True)
    status = json.loads((tmp_path / "coord" / "status.json").read_text())
    assert (status["steps"]["gpus"], status["steps"]["gpu_nodes"]) == (5, 2)
    board.new_attempt(1, "another")
    assert "gpus" not in board.clock  # the attempt's own count


def test_a_cpu_job_on_nodes_without_nvidia_smi_holds_none(tmp_path: Path) -> None:
    wc = _cfg(2)
    board = Board(wc, str(tmp_path / "coord"))
    board.heard(Peer("n1", _Channel()), _snap(wc, _gpu(None)))  # type: ignore[arg-type]
    assert (board.clock["gpus"], board.clock["gpu_nodes"]) == (0, 1)
    board.heard(Peer("n0", _Channel()), _snap(wc, _gpu(None)))  # type: ignore[arg-type]
    assert (board.clock["gpus"], board.clock["gpu_nodes"]) == (0, 2)


def test_hostile_readings_are_counted_never_trusted(tmp_path: Path) -> None:
    wc = _cfg(4)
    board = Board(wc, str(tmp_path / "coord"))
    n0 = Peer("n0", _Channel())  # type: ignore[arg-type]
    rows = HEADER + "".join(f"{i}, u{i}, n\n" for i in range(1000))
    board.heard(n0, _snap(wc, _gpu(rows)))  # 1,000 rows: 4 processes hold 4
    board.heard(n0, _snap(wc, _gpu(["index"])))  # another shape: malformed, dropped
    board.heard(n0, _snap(wc, {**_gpu(H100X8), "age": -1}))
    board.heard(n0, _snap(wc, _gpu(H100X8 + "x" * 20000)))  # over its bound
    board.heard(Peer("n9", _Channel()), _snap(wc, _gpu(H100X8)))  # type: ignore[arg-type]
    board.heard(Peer("n1", _Channel()), _snap(wc, _gpu(H100X8), run="20261125-101010-zzzz"))  # type: ignore[arg-type]
    assert board.malformed == 3
    assert board.clock["gpus_by_node"] == {"n0": 4} and board.clock["gpus"] == 4


def test_a_respawned_coordinator_goes_on_from_its_clocks_count(tmp_path: Path) -> None:
    wc = _cfg(4)
    board = Board(wc, str(tmp_path / "coord"))
    board.clock = {"gpus": 5, "gpu_nodes": 2, "gpus_by_node": {"n0": 4, "n1": 1, "n9": "x"}}
    board.heard(Peer("n1", _Channel()), _snap(wc, _gpu(None)))  # type: ignore[arg-type]
    assert (board.clock["gpus"], board.clock["gpu_nodes"]) == (5, 2)
    board.heard(Peer("n1", _Channel()), _snap(wc, _gpu(H100X8)))  # type: ignore[arg-type]
    assert (board.clock["gpus"], board.clock["gpus_by_node"]) == (8, {"n0": 4, "n1": 4})


def test_the_coordinators_clock_becomes_the_steps_note_the_ledger_reads() -> None:
    def add(rec: RunRecord, steps: object) -> None:
        plain = _steps_of(steps)
        if plain is not None:
            _note_steps(rec, plain=plain)

    rec = RunRecord("gc", run_id(931), "/x.yaml", "127.0.0.1", 1, [])
    add(rec, {"gpus": 0, "gpu_nodes": 2, "gpus_by_node": {"n0": 0}})
    assert rec.history[-1] == {**rec.history[-1], "what": "steps", "gpus": 0, "gpu_nodes": 2}
    clock = {"first_step_at": 1e9, "first_step": 1, "checkpoints": False, "gpus": 5,
             "gpu_nodes": 2, "last_step": float("nan"), "last_step_at": float("inf")}  # fmt: skip
    add(rec, clock)
    (note,) = [h for h in rec.history if h["what"] == "steps"]
    assert note["checkpoints"] is False and note["gpus"] == 5
    assert "last_step" not in note and "last_step_at" not in note and "gpus_by_node" not in note
    add(rec, {"gpus": 3, "gpu_nodes": 0})  # nothing known: no note
    assert [h for h in rec.history if h["what"] == "steps"] == [note]


def test_a_live_attempts_steps_are_rewritten_only_when_they_say_something_new() -> None:
    """Each cold `status` synced the step count into the record: a locked, fsynced
    rewrite of a 128-node record on every look."""
    rec = RunRecord("gc", run_id(932), "/x.yaml", "127.0.0.1", 1, [])
    first = {"first_step_at": 100.0, "first_step": 1, "gpus": 0, "gpu_nodes": 0}
    clock = {**first, "last_step": 50, "last_step_at": 200.0}
    assert _steps_due(rec, clock, final=False)  # no note yet
    _note_steps(rec, plain=clock)
    assert not _steps_due(rec, dict(clock), final=False)  # the same
    later = {**clock, "last_step": 60, "last_step_at": 200.0 + STEPS_EVERY / 2}
    assert not _steps_due(rec, later, final=False)  # a live attempt: soon again
    assert _steps_due(rec, later, final=True)  # its end is exact
    assert _steps_due(rec, {**later, "last_step_at": 200.0 + STEPS_EVERY}, final=False)
    assert _steps_due(rec, {**later, "checkpoints": True}, final=False)
    assert _steps_due(rec, {**clock, "gpus": 8, "gpu_nodes": 1}, final=False)


def test_a_killed_chains_last_attempt_gets_its_final_steps_at_once() -> None:
    """A user's kill ends the chain without the attempt's own end: its last clock must
    still be written at the next look, not STEPS_EVERY later (the ledger would keep a
    training time short by up to that much, for good)."""
    from mntui.sessions.launch.board import BoardView
    from mntui.sessions.runs import load_run
    from mntui.sessions.watch.clusterchain import fresh_steps, sync_chain

    run = run_id(933)
    rec = RunRecord("gc", run, "/x.yaml", "127.0.0.1", 1, [])
    rec.watch_port = 29501
    rec.create()

    def look(status: str, last_at: float) -> dict[str, Any] | None:
        clock = {"first_step_at": 100.0, "first_step": 1, "gpus": 0, "gpu_nodes": 0,
                 "last_step": int(last_at), "last_step_at": last_at}  # fmt: skip
        chain = {"chain": run, "status": status, "attempts": [{"attempt": 0, "run": run,
                                                               "steps": clock}]}  # fmt: skip
        view = BoardView({"at": 1.0}, None, True, chain=chain)
        got = sync_chain(rec, view)  # one record object every look, as `status --watch`
        shown = fresh_steps(got, view)[run]  # what this look shows (the chain's line)
        assert shown["last_step_at"] == last_at
        saved = load_run("gc", run)
        assert saved is not None
        return next((h for h in saved.history if h.get("what") == "steps"), None)

    first = look("running", 200.0)
    assert first is not None and first["last_step_at"] == 200.0
    soon = look("running", 200.0 + STEPS_EVERY / 2)
    assert soon is not None and soon["last_step_at"] == 200.0  # live: written later
    # looks every STEPS_EVERY / 2 on one object: written each STEPS_EVERY all the same
    step = STEPS_EVERY * 0.6
    for k in range(1, 4):
        kept = look("running", 200.0 + k * step)
        assert kept is not None and 200.0 + k * step - kept["last_step_at"] < STEPS_EVERY
    end = 200.0 + 3 * step + STEPS_EVERY * 0.1
    final = look("killed", end)
    assert final is not None and final["last_step_at"] == end


def test_a_restarts_new_attempt_never_takes_the_last_attempts_clock() -> None:
    """The coordinator puts a new attempt into chain.json before it next writes
    status.json, which still carries the last attempt's run and clock: that clock was
    taken as the new attempt's (its ledger counted the last one's training twice)."""
    from mntui.sessions.launch.board import BoardView
    from mntui.sessions.runs import NodeRecord, load_run
    from mntui.sessions.watch.clusterchain import fresh_steps, sync_chain

    run0, run1 = run_id(951), run_id(952)
    nodes = [NodeRecord("n0", "127.0.0.1", 0, "s", f"gr/{run0}/n0", f".mntui/runs/gr/{run0}/n0")]
    rec = RunRecord("gr", run0, "/x.yaml", "127.0.0.1", 1, nodes)
    rec.watch_port = 29501
    rec.create()
    clock0 = {"first_step_at": 100.0, "first_step": 1, "last_step": 90, "last_step_at": 190.0,
              "gpus": 0, "gpu_nodes": 1}  # fmt: skip
    end = {"state": "failed", "culprit": "n0", "cause": "n0: exit 1"}
    chain = {"chain": run0, "status": "restarting", "attempts": [
        {"attempt": 0, "run": run0, "end": end, "steps": clock0, "started_at": 90.0},
        {"attempt": 1, "run": run1, "started_at": 200.0},
    ]}  # fmt: skip
    status = {"run": run0, "attempt": 0, "steps": clock0}  # not written since the restart
    view = BoardView(status, None, True, chain=chain)
    latest = sync_chain(rec, view)
    assert latest.run_id == run1
    assert fresh_steps(latest, view) == {}
    got = load_run("gr", run1)
    assert got is not None and not [h for h in got.history if h.get("what") == "steps"]
    clock1 = {**clock0, "first_step_at": 210.0, "last_step_at": 215.0}  # its own, once written
    view1 = BoardView({"run": run1, "attempt": 1, "steps": clock1}, None, True, chain=chain)
    assert fresh_steps(latest, view1) == {run1: clock1}


def test_a_kill_before_this_machine_saw_the_restart_keeps_the_attempt_it_killed() -> None:
    """The laptop slept while the coordinator restarted the job; in the morning `mntui
    kill` (no `status` first) marks attempt 0, the one recorded here, killed, and the
    coordinator kills attempt 1. The next look records attempt 1, killed, with its
    training: before, the sync stopped at the kill and the ledger lost the attempt."""
    from mntui.sessions.launch.board import BoardView
    from mntui.sessions.runs import NodeRecord, RunStatus, load_run
    from mntui.sessions.watch.clusterchain import sync_chain

    run0, run1 = run_id(941), run_id(942)
    nodes = [NodeRecord("n0", "127.0.0.1", 0, "s", f"gk/{run0}/n0", f".mntui/runs/gk/{run0}/n0")]
    rec = RunRecord("gk", run0, "/x.yaml", "127.0.0.1", 1, nodes)
    rec.watch_port = 29501
    rec.create()
    rec.update(lambda r: (setattr(r, "status", RunStatus.KILLED), r.note("kill", by="user")))
    killed_at = next(h["at"] for h in rec.history if h["what"] == "kill")
    clock = {"first_step_at": killed_at - 7000, "first_step": 1, "last_step": 900,
             "last_step_at": killed_at - 1, "gpus": 0, "gpu_nodes": 1}  # fmt: skip
    end = {"state": "failed", "culprit": "n0", "cause": "n0: exit 1"}
    chain = {"chain": run0, "status": "killed", "attempts": [
        {"attempt": 0, "run": run0, "end": end, "delay": 1.0, "started_at": killed_at - 9000},
        {"attempt": 1, "run": run1, "started_at": killed_at - 7200, "steps": clock},
    ]}  # fmt: skip
    latest = sync_chain(rec, BoardView({"at": 1.0}, None, True, chain=chain))
    got = load_run("gk", run1)
    assert got is not None and latest.run_id == run1 and got.status is RunStatus.KILLED
    note = next(h for h in got.history if h.get("what") == "steps")
    assert note["last_step_at"] == killed_at - 1
    # an attempt the coordinator started after the kill is not recorded here
    run2 = run_id(943)
    late = {"attempt": 2, "run": run2, "started_at": killed_at + 60}
    sync_chain(load_run("gk", run0) or rec,
               BoardView({"at": 1.0}, None, True, chain={**chain, "attempts": [
                   *chain["attempts"], late]}))  # fmt: skip
    assert load_run("gk", run2) is None
