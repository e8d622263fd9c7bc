"""Issue 28, finding 8: a history never raises on valid JSON of an unexpected shape.

records.py promises "a history takes what each file holds, skips what it cannot read
and counts it, and never raises". Valid JSON of another shape (an older or newer mntui,
a hand edit, a disk bit flip that keeps JSON valid) made scan() raise, and scan runs
over *every job's* records (`history`, `nodes --history`, the chain's line of `status`
and `report`): one odd record of another job broke them all. Each value is now taken in its
one shape where the JSON becomes typed data (history/shape.py); these tests put odd
values at every key a reader looks at and run every reader over them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.errors import private_dir, state_dir
from mntui.sessions.history import (
    chain_line,
    fold,
    format_histories,
    format_ledgers,
    ledgers,
    quarantines,
    scan,
)
from mntui.sessions.history.records import read_doctor

RID = time.strftime("%Y%m%d-%H%M%S") + "-abcd"  # today: scan(since=...) opens it

GOOD = {"job": "other", "run_id": RID, "created_at": time.time(), "status": "failed",
        "nodes": [{"node": "n0"}]}  # fmt: skip

# Values JSON holds that no reader expects: json.dumps writes NaN and Infinity, and
# json.loads takes them and ints of any size; 500 levels parse, 100,000 do not.
ODD: list[Any] = [5, -1, 10**400, -(10**400), float("nan"), float("inf"), 1e308, True, None,
                  "x", "", [], {}, [1, "a"], {"a": [1]}, json.loads("[" * 500 + "]" * 500)]  # fmt: skip


def put(job: str, name: str, text: str, rid: str = RID) -> None:
    d = private_dir(state_dir() / job / rid)
    (d / name).write_text(text)


def rid(i: int) -> str:
    return f"{RID[:-4]}{i:04x}"


def every_reader() -> None:
    """What `mntui history`, `mntui nodes --history`, `status` and a quarantine run."""
    now = time.time()
    found = scan()
    format_histories(fold(found))
    format_ledgers(ledgers(found, now))
    fold(scan(since=3600, now=now))
    chain_line("other", RID)
    quarantines.quarantine_listing(now)


@pytest.mark.parametrize(
    "name,text",
    [
        ("run.json", json.dumps({**GOOD, "history": 5})),
        ("run.json", json.dumps({**GOOD, "nodes": 7})),
        ("run.json", json.dumps({**GOOD, "created_at": 10**400})),
        ("run.json", "[" * 100_000 + "]" * 100_000),
        ("report.json", json.dumps({"cause_node": "n0", "first_at": 10**400})),
    ],
    ids=["history-int", "nodes-int", "created-huge", "deep", "report-first-huge"],
)
def test_an_odd_record_is_skipped_never_raised(name: str, text: str) -> None:
    put("other", "run.json", json.dumps(GOOD))
    put("other", name, text)
    try:
        scan()
    except Exception as exc:
        pytest.fail(f"scan() raised {type(exc).__name__}: {str(exc)[:80]}")


def test_what_cannot_be_read_is_counted_and_the_rest_kept() -> None:
    put("other", "run.json", json.dumps({**GOOD, "history": 5, "nodes": 7}), rid(1))
    put("other", "run.json", json.dumps({**GOOD, "created_at": 10**400}), rid(2))
    put("other", "run.json", json.dumps({**GOOD, "created_at": float("nan")}), rid(3))
    put("other", "run.json", "[" * 100_000 + "]" * 100_000, rid(4))
    put("other", "run.json", json.dumps(GOOD), rid(5))
    put("other", "report.json", json.dumps({"cause_node": "n0", "first_at": 10**400}), rid(5))
    found = scan()
    assert found.skipped == 3 and found.partial == 2  # history and nodes of the first
    assert [r.run_id for r in found.runs] == [rid(1), rid(5)]
    kept = found.runs[1]
    assert kept.report is not None and kept.report.cause_node == "n0"
    assert kept.report.first_at is None  # out of range: missing, not a guess


def test_odd_values_at_every_key_of_a_run_and_its_notes_never_raise() -> None:
    note_keys = ("at", "what", "node", "state", "why", "first_step_at", "last_step_at",
                 "first_step", "last_step", "checkpoints", "checkpoint_at", "checkpoint_step")  # fmt: skip
    base = {**GOOD, "chain": RID, "attempt": 1, "killed_nodes": [], "history": []}
    i = 0
    for value in ODD:
        for key in (*base, "cause"):
            i += 1
            put("other", "run.json", json.dumps({**base, key: value}), rid(i))
        for key in ("node", "nproc"):
            i += 1
            node = {"node": "n0", "nproc": 2, key: value}
            put("other", "run.json", json.dumps({**base, "nodes": [node, value]}), rid(i))
        for key in note_keys:
            i += 1
            note = {"what": "watchdog-teardown", "at": 1.0, "node": "n0", "checkpoints": True,
                    "last_step": 5, "last_step_at": 2.0, key: value}  # fmt: skip
            steps = {**note, "what": "steps"}
            put("other", "run.json", json.dumps({**base, "history": [note, steps, value]}), rid(i))
    every_reader()
    assert scan().runs  # the readable ones were kept


def test_odd_values_in_reports_doctor_rows_and_quarantines_never_raise() -> None:
    report = {"cause_node": "n0", "cause": "c", "first_at": 1.0, "ended_at": 2.0,
              "ending": "torn-down", "consequences": ["n1 (node rank 1): x"],
              "nodes": [{"node": "n1", "finding": "x"}]}  # fmt: skip
    doctor = private_dir(state_dir() / "other" / "doctor")
    qdir = private_dir(quarantines.folder())
    for i, value in enumerate(ODD):
        for j, key in enumerate(report):
            r = rid(i * 100 + j)
            put("other", "run.json", json.dumps(GOOD), r)
            put("other", "report.json", json.dumps({**report, key: value}), r)
        row = {"node": "n0", "check": "ssh", "status": "FAIL", "detail": "d"}
        for key in (*row, "at"):
            rows = [{**row, key: value}, value]
            (doctor / f"{i}-{key}.json").write_text(json.dumps({"at": value, "rows": rows}))
            name = f"n{i}-{key}"  # the file's name is the node's: read whole
            q = {"node": name, "who": "w", "when": 1.0, "until": time.time() + 60, "why": "y"}
            (qdir / f"{name}.json").write_text(json.dumps({**q, key: value}))
        (doctor / f"{i}.json").write_text(json.dumps(value))
        (qdir / f"{i}.json").write_text(json.dumps(value))
    (doctor / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (qdir / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    every_reader()
    assert all(isinstance(r["node"], str) for r in read_doctor(state_dir(), None))


def test_a_quarantine_that_cannot_end_is_no_quarantine() -> None:
    """An `until` of NaN, Infinity or 10**400 would keep a node out forever."""
    qdir = private_dir(quarantines.folder())
    for i, until in enumerate((float("nan"), float("inf"), 10**400, "9999999999", True)):
        q = {"node": f"g{i}", "who": "w", "when": 1.0, "until": until, "why": "y"}
        (qdir / f"g{i}.json").write_text(json.dumps(q))
    listing = quarantines.quarantine_listing()
    assert listing.active == () and listing.unreadable == 5


# -- the run records themselves: every verb and the watchdog read them -----------------

ODD_RUNS = {
    "history-int": {"history": 5},
    "nodes-int": {"nodes": 7},
    "node-rank-text": {
        "nodes": [
            {"node": "n0", "host": "h", "rank": "x", "session": "s", "tag": "t", "run_dir": "d"}
        ]
    },
    "created-huge": {"created_at": 10**400},
    "created-nan": {"created_at": float("nan")},
    "killed-int": {"killed_nodes": 5},
    "status-list": {"status": ["running"]},
    "attempt-bool": {"attempt": True},
    "unknown-key": {"surprise": 1},
}


@pytest.mark.parametrize("odd", list(ODD_RUNS.values()), ids=list(ODD_RUNS))
def test_an_odd_run_record_is_unreadable_never_raised(odd: dict[str, object]) -> None:
    """runs.load_run is read by every verb, the watchdog (read_status: None is "unknown",
    never "stand down") and a user's kill (live_runs): a record of another shape is
    unreadable there too, not a raise, nor an AttributeError later under the run's lock."""
    from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, latest, live_runs, load_run

    rec = RunRecord("oddjob", RID, "c.yaml", "m", 1, [NodeRecord("n0", "h", 0, "s", "t", "d")],
                    status=RunStatus.RUNNING)  # fmt: skip
    rec.create()
    good = json.loads((rec.dir / "run.json").read_text())
    (rec.dir / "run.json").write_text(json.dumps({**good, **odd}))
    assert load_run("oddjob", RID) is None and latest("oddjob") is None
    assert live_runs("oddjob") == []
    rec.update(lambda r: r.note("kill", by="user"))  # the one in memory is written whole
    assert (back := load_run("oddjob", RID)) is not None and back.stopped_by_user


def test_a_deeply_nested_or_huge_run_record_is_unreadable() -> None:
    from mntui.sessions.jsonshape import MAX_FILE
    from mntui.sessions.runs import load_run

    d = private_dir(state_dir() / "oddjob" / RID)
    (d / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    assert load_run("oddjob", RID) is None
    (d / "run.json").write_text(" " * (MAX_FILE + 1) + "{}")
    assert load_run("oddjob", RID) is None


def test_status_on_an_unreadable_latest_record_is_no_nothing_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 3 says nothing runs; a latest record that is there but does not read proves
    no such thing (the review of issue 29's exit code): one line and exit 1."""
    from mntui.sessions.runs import NodeRecord, RunRecord
    from mntui.tui.cli.entry import main

    config = tmp_path / "c.yaml"
    config.write_text("job: oddjob\nnodes: [n0]\ncommand: sleep 1\n")
    assert main(["-c", str(config), "status"]) == 3
    rec = RunRecord("oddjob", RID, "c.yaml", "m", 1, [NodeRecord("n0", "h", 0, "s", "t", "d")])
    rec.create()
    (rec.dir / "run.json").write_text(json.dumps({"history": 5}))
    capsys.readouterr()
    assert main(["-c", str(config), "status"]) == 1
    err = capsys.readouterr().err
    assert "cannot be read" in err and err.count("\n") == 1
