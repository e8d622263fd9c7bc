"""Issue 28, finding 7: node text reached the terminal unfiltered. A Flight Recorder dump's
frame file name (any string a rank's process puts there) became the collective's "site",
then flightrec's findings, the conclusion's headline, the report's headline (report.txt,
run.json `cause`), and from there `mntui report` / `mntui status` via say(), which wrote
raw: an OSC 52 (clipboard write) or a screen clear from a node landed in the user's
terminal. py-spy's function names (the job's PATH picks the py-spy) took the same road.

One rule (mntui.sessions.termsafe) is applied where node text enters (the dump's and
py-spy's strings), where the report is written (report.txt, `cause`), and in the CLI's
one writer (say).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from mntui.sessions.launch import LineSplitter
from mntui.sessions.poll import NodeSnapshot, NodeState, derive
from mntui.sessions.poll.gpu import parse_reading
from mntui.sessions.procs import parse_listener
from mntui.sessions.report import flightrec, save
from mntui.sessions.report.evidence import NodeEvidence
from mntui.sessions.report.failure import Ending, build, summarize_node
from mntui.sessions.report.stacks import parse_capture
from mntui.sessions.report.verdict import Conclusion, conclude
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, load_run
from mntui.sessions.termsafe import clean, one_line
from mntui.tui.cli.output import clear_screen, say

EVIL = "/w/\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[Htrain.py"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def op(seq: int, done: bool, filename: str) -> dict[str, object]:
    return {"collective_seq_id": seq, "profiling_name": "nccl:all_reduce",
            "process_group": ["0", "default_pg"], "input_sizes": [[4]],
            "input_dtypes": ["Float"], "retired": done, "time_created_ns": 10**18,
            "frames": [{"name": "step", "filename": filename, "line": 66}]}  # fmt: skip


def dump(ops: list[dict[str, object]], enq: int, done: int) -> bytes:
    status = {"0": {"last_enqueued_collective": enq, "last_completed_collective": done}}
    return pickle.dumps({"entries": ops, "pg_status": status})


def test_a_dumps_strings_never_reach_the_headline_with_control_characters() -> None:
    files = {
        ("n0", "rank_0"): dump([op(1, True, EVIL), op(2, False, EVIL)], 2, 1),
        ("n1", "rank_1"): dump([op(1, True, EVIL)], 1, 1),
    }
    reading = flightrec.read(files, world=2)
    assert reading.findings, "the dumps should name the missing rank"
    c = conclude(("n0", NodeState.STALLED, "no output"), [], {}, {"n0": (0,), "n1": (1,)}, reading)
    assert c is not None
    bad = CONTROL.findall(c.headline)
    assert not bad, f"headline carries {bad!r}: {c.headline!r}"
    assert "(default_pg, 4×float32, train.py:66)" in c.headline


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (EVIL, "/w/train.py"),
        ("a\x1b]0;title\x1b\\b", "ab"),  # OSC ended by ST
        ("a\x9d52;c;eA==\x9cb\x9b2Jc", "abc"),  # 8-bit OSC and CSI
        ("a\x1bcb\x1b(Bc\x1b7d", "abcd"),  # reset, charset, save cursor
        ("a\x1bP1$r\x1b\\b\x1b_apc\x07c", "abc"),  # DCS, APC
        ("a\x1b[31mred\x1b[0m\r\x00\x7f\x85", "ared"),
        ("a\x1b]0;unterminated\nnext", "a\nnext"),  # no terminator: cut at the line's end
        ("tabs\tand\nlines\n", "tabs\tand\nlines\n"),
        ("é 中文 [rank1]:[E1122]", "é 中文 [rank1]:[E1122]"),
        ("ok \u202egnp.exe\u202c", "ok gnp.exe"),  # right-to-left override, then pop
        ("a\u2066b\u2069\u200e\u200f\u061cc", "abc"),  # isolates, marks
        ("a\u2028b\u2029c\u200bd\ufeffe\U000e0041f", "abcdef"),  # separators, invisibles
        (
            "\U0001f469\u200d\U0001f4bb \u0645\u200c\u06cc",
            "\U0001f469\u200d\U0001f4bb \u0645\u200c\u06cc",
        ),
    ],
)
def test_one_rule_drops_sequences_whole_and_every_control(raw: str, shown: str) -> None:
    assert clean(raw) == shown
    assert one_line(raw) == shown.replace("\n", " ").replace("\t", " ")
    assert one_line("x" * 100 + "\x1b[2J", 10) == "x" * 10


def test_every_format_character_but_the_joiners_is_dropped() -> None:
    """The rule's list is fixed (the node's Python may have an older table); this
    Python's table must find nothing it misses: every Cf, Zl and Zp but ZWNJ and ZWJ."""
    kept = {"\u200c", "\u200d"}
    wanted = [
        chr(c)
        for c in range(sys.maxunicode + 1)
        if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp") and chr(c) not in kept
    ]
    assert wanted and clean("".join(wanted)) == ""
    assert clean("".join(kept)) == "".join(kept)


def test_py_spy_names_and_errors_are_made_safe() -> None:
    frames = [{"name": "wait\x1b]52;c;eA==\x07", "filename": EVIL, "line": 66},
              {"name": 7, "filename": "/w/x.py", "line": 10**40}]  # fmt: skip
    spy = json.dumps([{"thread_name": "MainThread", "frames": frames}])
    b64 = base64.b64encode(spy.encode()).decode()
    err = base64.b64encode(b"Error: \x1b[2Jno such process").decode()
    out = f"@N1RANK 10 0 S\n@N1STACK 10 0 {b64} \n@N1RANK 11 1 S\n@N1STACK 11 1  {err}\n"
    got = parse_capture("n0", out, "N1")
    (one, two) = got.stacks
    assert [(f.name, f.file, f.line) for f in one.frames] == [("wait", "/w/train.py", 66)]
    assert two.error == "no such process"
    assert not CONTROL.search(one.summary + (two.error or ""))


def test_log_lines_are_cut_safe_for_every_view() -> None:
    """`mntui logs`, `status` and the app's panes get their lines from LineSplitter."""
    split = LineSplitter()
    assert split.feed(f"a {EVIL}\n\tb\x1b[31m".encode()) == ["a /w/train.py"]
    assert split.pending() == "\tb" and split.flush() == ["\tb"]


def test_say_writes_no_control_but_newlines_and_tabs(capsys: pytest.CaptureFixture[str]) -> None:
    say("cause:", EVIL, "\tend")
    say(f"node: {EVIL}", err=True)
    clear_screen()  # mntui's own escape: the one writer that may
    out, err = capsys.readouterr()
    assert out == "cause: /w/train.py \tend\n\x1b[H\x1b[2J" and err == "node: /w/train.py\n"


def record(job: str, cause: str | None) -> RunRecord:
    rec = RunRecord(job, "20260101-000000-abcd", "c", "localhost", 29555,
                    [NodeRecord("node0", "localhost", 0, "s", "t", "/nonexistent/run")],
                    status=RunStatus.TORN_DOWN, cause=cause)  # fmt: skip
    rec.create()
    return rec


def test_the_saved_report_and_its_cause_carry_no_control() -> None:
    rec = record("jsave", None)
    built = build("jsave", rec.run_id, [], [], trigger=None, ended_at=None, ending=Ending.LIVE,
                  conclusion=Conclusion(f"rank 1 waits in {EVIL}:66", (), (EVIL,), ()))  # fmt: skip
    save(rec, built)
    text = (rec.dir / "report.txt").read_text()
    cause = (load_run("jsave", rec.run_id) or rec).cause or ""
    assert "rank 1 waits in /w/train.py:66" in text and cause == "rank 1 waits in /w/train.py:66"
    assert not CONTROL.search(text) and not CONTROL.search(cause)
    assert EVIL in json.loads((rec.dir / "report.json").read_text())["headline"]  # escaped


def test_mntui_report_and_status_print_no_control(tmp_path: Path) -> None:
    """The real CLI on a recorded run whose report and cause were written raw (by an
    older mntui, or by anyone who can write the run's files)."""
    rec = record("jterm", f"rank 1 waits in {EVIL}:66")
    (rec.dir / "report.txt").write_text(f"rank 1 waits in {EVIL}:66\n\nstacks:\n  {EVIL}\n")
    (rec.dir / "report.json").write_text("{}")
    path = tmp_path / "job.yaml"
    path.write_text("job: jterm\nnodes:\n  - name: node0\n    host: localhost\ncommand: x\n")
    for verb in ("report", "status"):
        res = subprocess.run(
            [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), verb],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert "rank 1 waits in /w/train.py:66" in res.stdout, (verb, res.stdout, res.stderr)
        assert not CONTROL.search(res.stdout + res.stderr), (verb, res.stdout)


def test_node_text_is_made_safe_where_it_enters_the_poll_and_the_report() -> None:
    """What the app's panes, toasts and report screen show, and the CLI prints, comes
    from here: a listener's command line, nvidia-smi's lines, the connection's error,
    the log and kernel lines of the report. The app's and the CLI's writers apply the
    rule too; these are cleaned once for every view, the JSON and webhooks included."""
    b64 = base64.b64encode(f"python3\0{EVIL}\0-x\nLISTEN".encode()).decode()
    holder = parse_listener(f"LISTEN 29500 42 {base64.b64encode(b'bob').decode()} {b64}")
    assert holder is not None and holder.cmdline == "python3 /w/train.py -x LISTEN"
    gpu = parse_reading(f"GPU fell off the bus {EVIL}\n", f"pid, process_name\n7, {EVIL}\n")
    assert gpu.errors == ("GPU fell off the bus /w/train.py",)
    assert [a.process_name for a in gpu.apps] == ["/w/train.py"]
    lost = NodeSnapshot("n0", 0, 0.0, reachable=False, error=f"ssh: {EVIL}\nbanner")
    assert derive(lost, 60.0).why == "ssh: /w/train.py banner"
    log = f"step 1\npython3: can't open file '{EVIL}': [Errno 2] No such file\n".encode()
    ev = NodeEvidence("n0", log, 137, 5.0, (f"Killed process 7 ({EVIL})",), {})
    node = summarize_node("n0", 0, NodeState.FAILED, [], ev, None, None, f"read: {EVIL}")
    built = build("j", "r", [node], [], trigger=None, ended_at=None, ending=Ending.ENDED)
    shown = [built.headline, *node.last_lines, *node.kernel, node.evidence_error or ""]
    assert "'/w/train.py': [Errno 2] No such file; kernel: Killed process 7 (/w/train.py)" in (
        built.headline
    ), shown
    assert not any(CONTROL.search(x) for x in shown), shown
