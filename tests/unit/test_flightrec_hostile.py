"""Issue 28, finding 4: a hostile Flight Recorder dump must neither stall the teardown nor
drop the report. Dumps come from the nodes (a hostile or broken rank writes them). The
unpickler refuses globals (no code runs); beyond that:
- a float inf/nan or a huge int where an int or a time goes raised OverflowError out of
  flightrec.read(), and postmortem.try_report dropped the *whole* report of the hang;
- `input_sizes` made of one memoised 4300-digit string repeated (pickle memo: 2 bytes a
  copy) made `math.prod` build a multi-megabyte integer: a 6.5 KB dump took 39 s;
- a dump named `..` became record.dir/flight-recorder/<node>/.. and raised
  IsADirectoryError, which lost the whole report;
- (found while fixing) a dict keyed by a memo-shared tuple 60 levels deep hangs the
  unpickler itself, in C, holding the GIL: 163 bytes stop every thread of the process.
  The report therefore reads dumps in a child process, each within a time limit.
"""

from __future__ import annotations

import base64
import pickle
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mntui.sessions.report import flightrec, frchild, frparse
from mntui.sessions.report.evidence import NodeEvidence, parse_evidence, save_flight_records
from mntui.sessions.runs import NodeRecord, RunRecord

FR = Path(__file__).resolve().parents[1] / "data" / "flight_recorder"
# {"entries": [], "pg_status": {t60: 1}}, t(n+1) = (t(n), t(n)) through the memo: hashing
# t60 as the dict's key takes 2**60 steps. Written opcode by opcode: building it in this
# process to pickle it would hash it too.
HASH_BOMB = (
    b"\x80\x02}(X\x07\x00\x00\x00entries]X\t\x00\x00\x00pg_status}X\x01\x00\x00\x00x"
    + b"2\x86" * 60
    + b"K\x01su."
)


def entry(**over: object) -> dict[str, object]:
    e = {
        "collective_seq_id": 1,
        "profiling_name": "nccl:all_reduce",
        "process_group": ["0", "default_pg"],
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "frames": [{"name": "f", "filename": "train.py", "line": 3}],
        "time_created_ns": 1_700_000_000_000_000_000,
        "retired": False,
    }
    e.update(over)
    return e


def dump(*entries: dict[str, object], status: object = None) -> bytes:
    return pickle.dumps({"entries": list(entries), "pg_status": status or {}})


def real() -> dict[tuple[str, str], bytes]:
    return {(f"n{r}", f"rank_{r}"): (FR / "sleep" / f"rank_{r}").read_bytes() for r in (0, 1)}


def test_a_dump_naming_code_is_refused() -> None:
    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("PWNED",))

    assert flightrec.load(pickle.dumps({"entries": [Evil()]})) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"collective_seq_id": float("inf")},
        {"collective_seq_id": float("nan")},
        {"time_created_ns": 10**400},
        {"frames": [{"name": "f", "filename": "train.py", "line": float("inf")}]},
        {"collective_seq_id": True},
        {"input_sizes": [[2**40, 2**40]]},  # more elements than int64 counts
        {"input_sizes": [[1] * (frparse.MAX_DIMS + 1)]},
        {"frames": [{"name": "f", "filename": "t.py", "line": 1}] * (frparse.MAX_FRAMES + 1)},
        {"profiling_name": "x" * (frparse.MAX_TEXT + 1)},
        {"process_group": [["a"] * 3, "pg"]},
    ],
    ids=[
        "seq-inf",
        "seq-nan",
        "time-huge",
        "line-inf",
        "seq-bool",
        "elements",
        "dims",
        "frames",
        "long-name",
        "pg",
    ],
)
def test_a_hostile_dump_is_counted_never_raised(bad: dict[str, object]) -> None:
    good = dump(entry())
    files = {("n0", "rank_0"): good, ("n1", "rank_1"): dump(entry(**bad))}
    try:
        reading = flightrec.read(files, world=2)
    except Exception as exc:
        pytest.fail(f"flightrec.read raised {type(exc).__name__}: {exc}")
    assert reading.malformed == ("n1/rank_1",)
    assert [d.rank for d in reading.dumps] == [0]


@pytest.mark.parametrize(
    "status",
    [{"0": {"last_enqueued_collective": 10**400, "last_completed_collective": 0}},
     {("0",) * 2: {"last_enqueued_collective": 1, "last_completed_collective": 0}},
     {"0": ["not", "a", "dict"]}],
    ids=["huge", "tuple-key", "list"],
)  # fmt: skip
def test_a_hostile_pg_status_is_counted(status: object) -> None:
    files = {("n0", "rank_0"): dump(entry()), ("n1", "rank_1"): dump(entry(), status=status)}
    assert flightrec.read(files, world=2).malformed == ("n1/rank_1",)


BOMB = textwrap.dedent(
    """
    import pickle, sys, time
    sys.path[:0] = {path!r}
    from mntui.sessions.report import flightrec
    digits = "9" * 4300
    # one memoised string, referenced N times: [digits] * N pickles as 1 copy + N GETs
    e = {{"collective_seq_id": 1, "profiling_name": "nccl:all_reduce",
         "process_group": ["0", "pg"], "input_sizes": [[digits] * 3000],
         "input_dtypes": ["Float"], "frames": [], "retired": False}}
    data = pickle.dumps({{"entries": [e] * 4, "pg_status": {{}}}})
    t0 = time.perf_counter()
    flightrec.read({{("n0", "rank_0"): data}}, world=1)
    print(len(data), round(time.perf_counter() - t0, 2))
    """
)


def test_a_small_dump_cannot_keep_the_manager_busy() -> None:
    code = BOMB.format(path=sys.path)
    try:
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=5
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading one ~17 KB dump took more than 5 s (math.prod of a memo bomb)")
    size, seconds = res.stdout.split()
    assert float(seconds) < 1.0, f"a {size}-byte dump took {seconds}s to read"


def test_a_memo_repeated_entry_is_read_once_and_many_tensors_are_summed_up() -> None:
    big = entry(input_sizes=[[4]] * 40, input_dtypes=["Float"] * 40)
    data = dump(*[big] * frparse.MAX_ENTRIES)
    t0 = time.monotonic()
    reading = flightrec.read({("n0", "rank_0"): data}, world=1)
    assert time.monotonic() - t0 < 5.0
    (op, *_) = reading.dumps[0].ops["0 default_pg"]
    assert op.shape == "4×float32, 4×float32, 4×float32, 4×float32, +36 more"
    too_many = dump(*[big] * (frparse.MAX_ENTRIES + 1))
    assert flightrec.read({("n0", "rank_0"): too_many}).malformed == ("n0/rank_0",)


def test_the_child_reads_what_the_process_reads() -> None:
    files = {**real(), ("n1", "notes"): b"x", ("n1", "rank_2"): b"\x80\x05garbage"}
    assert frchild.read_within(files, world=3) == flightrec.read(files, world=3)


def test_a_dump_that_hangs_the_unpickler_is_counted_and_the_others_are_read() -> None:
    files = {**real(), ("n1", "rank_2"): HASH_BOMB, ("n2", "rank_3"): real()[("n0", "rank_0")]}
    t0 = time.monotonic()
    r = frchild.read_within(files, world=4, per_dump=2.0)
    assert time.monotonic() - t0 < 2.0 + frchild.START + 5.0
    assert r.malformed == ("n1/rank_2",) and [d.rank for d in r.dumps] == [0, 1, 3]
    assert r.culprits == (1,), r.findings
    assert r.findings[-1] == "1 dump(s) not read within the time budget: n1/rank_2"


def test_the_budget_for_all_dumps_counts_what_it_left_unread() -> None:
    files = {("n0", "rank_0"): HASH_BOMB, **{k: v for k, v in real().items() if k[0] == "n1"}}
    r = frchild.read_within(files, world=2, budget=1.0, per_dump=10.0)
    assert r.malformed == ("n0/rank_0", "n1/rank_1") and not r.dumps
    assert "2 dump(s) not read within the time budget" in r.findings[-1]


def test_reading_a_hostile_dump_never_holds_the_other_threads() -> None:
    """The kill runs in a thread of the same process as the report: while the report
    reads a dump that hangs its reader, the kill's thread must go on."""
    result: list[flightrec.Reading] = []
    reader = threading.Thread(
        target=lambda: result.append(
            frchild.read_within({("n0", "rank_0"): HASH_BOMB}, 1, budget=3.0)
        )
    )
    reader.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:  # other work of this process keeps running
        time.sleep(0.01)
    assert time.monotonic() - t0 < 3.0, "the process was held while a dump was read"
    reader.join(timeout=30)
    assert not reader.is_alive() and result[0].malformed == ("n0/rank_0",)


def test_a_dump_named_dotdot_is_skipped_not_fatal() -> None:
    """evidence._SAFE_NAME ([A-Za-z0-9._-]{1,128}) accepted "." and "..": the node's name
    for a dump became record.dir/flight-recorder/<node>/.. -- a directory -- and
    save_flight_records raised IsADirectoryError, which lost the whole report. The name
    is now refused where it is parsed (counted as malformed), and a name that reaches
    the save anyway is skipped."""
    for bad in ("..", "."):
        name = base64.b64encode(bad.encode()).decode()
        ev = parse_evidence("n0", f"@xFR {name} {base64.b64encode(b'data').decode()}\n", "x")
        assert ev.flight_records == {} and ev.malformed == 1
    ok = parse_evidence("n0", f"@xFR {base64.b64encode(b'.rank_0').decode()} ZGF0YQ==\n", "x")
    assert ok.flight_records == {".rank_0": b"data"}
    rec = RunRecord(
        "j", "20260101-000000-abcd", "c", "m", 1, [NodeRecord("n0", "h", 0, "s", "t", "d")]
    )
    rec.create()
    given = NodeEvidence("n0", b"", None, None, (), {"..": b"x", "rank_0": b"y"})
    try:
        saved = save_flight_records(rec, {"n0": given})
    except OSError as exc:
        pytest.fail(f"a node-chosen dump name '..' raised {type(exc).__name__}: {exc}")
    assert saved == [rec.dir / "flight-recorder" / "n0" / "rank_0"]
