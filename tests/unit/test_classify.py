"""The classifier against real log excerpts (tests/data/logs) and against hostile input.

Each fixture is a verbatim excerpt from a public issue, so a rule that only matches text we
imagined fails here. EXPECTED.json says what `first_error` must return for each one.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.node.rules.classify import MAX_LINES, MAX_MESSAGE_CHARS, classify, first_error
from mntui.sessions.node.rules.logrules import Cause, Finding

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
# Real torchrun runs of this machine's torch (each file's header says how), for the
# startup errors no public excerpt was taken for.
RECORDED = Path(__file__).resolve().parents[1] / "data" / "recorded_logs"
EXPECTED: dict[str, dict[str, Any]] = json.loads((LOGS / "EXPECTED.json").read_text("utf-8"))


def load(name: str, folder: Path = LOGS) -> list[str]:
    """The excerpt without its `#` provenance header."""
    lines = (folder / f"{name}.log").read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return lines


def prefixed(tag: str, lines: list[str]) -> list[str]:
    return [f"{tag}{line}" for line in lines]


# --- the fixture table --------------------------------------------------------------------


def test_every_fixture_has_an_expectation_and_a_source() -> None:
    names = {p.stem for p in LOGS.glob("*.log")}
    assert names == set(EXPECTED)
    assert len(names) >= 14
    for name in names:
        text = (LOGS / f"{name}.log").read_text(encoding="utf-8")
        header = "".join(line for line in text.splitlines() if line.startswith("#"))
        assert text.startswith("# ") and len(load(name)) > 0, name
        assert "Address:" in header or "COMPOSITE" in header, name
        assert "Verbatim" in header or "COMPOSITE" in header, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_first_error_of_fixture(name: str) -> None:
    expected = EXPECTED[name]
    found = first_error(load(name))
    assert found is not None
    assert found.cause == Cause(expected["cause"])
    assert found.secondary is expected["secondary"]
    for key in ("exception", "location", "rank"):
        if key in expected:
            assert getattr(found, key) == expected[key], key
    assert found.summary and "\n" not in found.summary
    assert found.message is None or len(found.message) <= MAX_MESSAGE_CHARS


def test_fixtures_cover_every_cause() -> None:
    seen = {f.cause for name in EXPECTED for f in classify(load(name))}
    recorded = {f.cause for p in RECORDED.glob("*.log") for f in classify(load(p.stem, RECORDED))}
    assert seen | recorded == set(Cause)


# --- the job could not start: python's own line, not torchrun's exit code -----------------------


@pytest.mark.parametrize(
    ("name", "summary", "line"),
    [
        (
            "torchrun_cant_open_file",
            "python: can't open file '/tmp/rec/trian.py': [Errno 2] No such file or directory",
            0,
        ),
        ("torchrun_no_module", "No module named trainpkg", 0),
        ("torchrun_syntax_error", "SyntaxError: '(' was never closed", 3),
    ],
)
def test_a_startup_error_beats_torchruns_worker_failed(name: str, summary: str, line: int) -> None:
    """A mistyped script, a module not there, a syntax error: python says so in its first
    line, and torchrun's table after it says only `exitcode 2` (or 1)."""
    lines = load(name, RECORDED)
    assert any("worker failed with exitcode" in f.summary for f in classify(lines))
    found = first_error(lines)
    assert found is not None
    assert (found.cause, found.summary, found.line) == (Cause.STARTUP, summary, line)
    assert found.mistake and not found.secondary


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        (
            "/usr/bin/python3: Error while finding module specification for "
            "'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')",
            "No module named 'torch'",
        ),
        ("[default1]:IndentationError: unexpected indent", "IndentationError: unexpected indent"),
    ],
)
def test_startup_error_lines(text: str, summary: str) -> None:
    found = first_error([text])
    assert found is not None and (found.cause, found.summary) == (Cause.STARTUP, summary)


@pytest.mark.parametrize(
    "text",
    [
        "warning: optional backend unavailable (No module named 'triton')",
        "loading: can't open file cache.bin, rebuilding",
        "step 3 loss 2.1 SyntaxError: in a printed string",
    ],
)
def test_a_mention_of_a_startup_error_is_not_one(text: str) -> None:
    assert first_error([text]) is None


def test_a_missing_module_in_a_traceback_is_a_startup_error_where_it_was_imported() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/u/proj/train.py", line 3, in <module>',
        "    import wandb",
        "ModuleNotFoundError: No module named 'wandb'",
    ]
    found = first_error(lines)
    assert found is not None and found.cause is Cause.STARTUP and found.mistake
    assert found.summary == "No module named 'wandb' (train.py:3)"


def test_control_bytes_never_reach_a_summary() -> None:
    """A summary is shown in a terminal (the report, the doctor's rows). A lone control
    goes; one that starts a sequence takes the sequence with it (the next test)."""
    line = "/usr/bin/python3: can't open file '/w/\x07tr\x00ai\x7fn\x85.py': [Errno 2] No such file"
    found = first_error([line])
    assert found is not None
    assert found.summary == "python3: can't open file '/w/train.py': [Errno 2] No such file"


def test_escape_sequences_leave_a_finding_whole() -> None:
    """An OSC 52 (a clipboard write), a screen clear, an 8-bit CSI and OSC: each removed
    with its body, by the rule every view applies (termsafe.py); markup-like text is text."""
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J\x9d0;t\x9c[/][red]"
    line = f"/usr/bin/python3: can't open file '/w/{hostile}train.py': [Errno 2] No such file"
    bar = f"  3%|#  | 3/100{hostile}\r{OOM_LINE}{hostile}"
    found = classify([line, "", bar])
    assert [f.summary for f in found][:1] == [
        "python3: can't open file '/w/[/][red]train.py': [Errno 2] No such file"
    ]
    assert [(f.cause, f.line) for f in found] == [(Cause.STARTUP, 0), (Cause.CUDA_OOM, 2)]
    for f in found:
        shown = " ".join(x or "" for x in (f.summary, f.exception, f.message, f.location))
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|52;c;", shown), shown


def test_only_the_jobs_own_mistakes_are_marked() -> None:
    oom = first_error(load("cuda_oom_traceback"))
    busy = first_error(load("address_in_use_tcpstore"))
    assert oom is not None and not oom.mistake
    assert busy is not None and busy.cause is Cause.ADDRESS_IN_USE and busy.mistake


def test_findings_are_in_log_order() -> None:
    for name in EXPECTED:
        lines = [f.line for f in classify(load(name))]
        assert lines == sorted(lines), name


# --- prefixes and ranks ---------------------------------------------------------------------


def test_torchrun_role_prefix_is_stripped_and_gives_the_rank() -> None:
    found = first_error(prefixed("[default1]:", load("python_exception")))
    assert found is not None
    assert (found.cause, found.rank, found.line) == (Cause.TRACEBACK, 1, 0)
    assert (found.exception, found.location) == ("KeyError", "train.py:48")


def test_interleaved_ranks_keep_their_own_tracebacks() -> None:
    oom = prefixed("[rank0]: ", load("cuda_oom_traceback"))
    key = prefixed("[rank1]: ", load("python_exception"))
    mixed = [line for pair in zip(oom, key, strict=True) for line in pair]
    got = {(f.cause, f.rank, f.location, f.exception) for f in classify(mixed)}
    assert got == {
        (Cause.CUDA_OOM, 0, "train.py:228", "RuntimeError"),
        (Cause.TRACEBACK, 1, "train.py:48", "KeyError"),
    }


def test_rank_comes_from_the_text_when_there_is_no_prefix() -> None:
    wall = [line.split("]:", 1)[1] for line in load("nccl_watchdog_timeout")]  # drop [rankN]:
    assert [f.rank for f in classify(wall)] == [1, 0, 2]


def test_host_and_timestamp_before_the_rank_prefix() -> None:
    assert [f.rank for f in classify(load("nccl_watchdog_host_prefixed"))] == [14, 12, 11, 15]
    found = first_error(load("cuda_oom_timestamped_rank"))
    assert found is not None and found.rank == 3
    assert found.exception == "torch.OutOfMemoryError"


# --- primary versus secondary -----------------------------------------------------------------


def test_primary_after_secondaries_is_still_the_first_error() -> None:
    wall = load("nccl_watchdog_timeout")
    lines = wall + load("python_exception")
    findings = classify(lines)
    assert findings[0].secondary and findings[0].cause is Cause.NCCL_TIMEOUT
    found = first_error(lines)
    assert found is not None
    assert (found.cause, found.line, found.secondary) == (Cause.TRACEBACK, len(wall), False)


def test_only_secondaries_gives_the_first_secondary() -> None:
    found = first_error(load("nccl_watchdog_timeout"))
    assert found is not None and found.secondary
    assert (found.line, found.rank) == (0, 1)


def test_watchdog_wall_is_one_finding_per_rank() -> None:
    findings = classify(load("nccl_watchdog_timeout"))
    assert [(f.cause, f.rank) for f in findings] == [(Cause.NCCL_TIMEOUT, r) for r in (1, 0, 2)]
    assert findings[0].summary == "NCCL collective ALLREDUCE timed out after 600020 ms"


def test_launcher_sigterm_after_an_oom_is_secondary() -> None:
    findings = classify(load("oom_then_sigterm"))
    assert [(f.cause, f.secondary) for f in findings] == [
        (Cause.CUDA_OOM, False),
        (Cause.SIGNAL, True),
    ]


def test_torchrun_exit_line_and_its_table_are_one_finding() -> None:
    findings = classify(load("childfailed_sigkill"))
    assert len(findings) == 1
    assert findings[0].message == "exitcode -9 (SIGKILL)"
    assert findings[0].summary == "torchrun: worker failed with exitcode -9 (SIGKILL)"


def test_multi_line_nccl_error_is_one_finding() -> None:
    findings = classify(load("nccl_unhandled_system_error"))
    assert [f.cause for f in findings] == [Cause.NCCL_ERROR]
    assert findings[0].summary == "NCCL error: unhandled system error"


def test_chained_traceback_is_one_finding_named_by_its_known_cause() -> None:
    chain = ["", "During handling of the above exception, another exception occurred:", ""]
    findings = classify(load("cuda_oom_traceback") + chain + load("python_exception"))
    assert [(f.cause, f.line) for f in findings] == [(Cause.CUDA_OOM, 0)]


def test_faulthandler_ignores_user_frames_of_other_threads() -> None:
    found = first_error(load("segfault_faulthandler_threads"))
    assert found is not None and found.location is None


# --- hostile input --------------------------------------------------------------------------

OOM_LINE = load("cuda_oom_traceback")[-1]


def test_a_megabyte_line_is_capped() -> None:
    assert classify(["x" * 1_000_000]) == []
    found = first_error([OOM_LINE + "y" * 1_000_000])
    assert found is not None and found.cause is Cause.CUDA_OOM
    assert found.message is not None and len(found.message) <= MAX_MESSAGE_CHARS


def test_invalid_text_never_raises() -> None:
    garbage = b"\xff\xfe\x00\x80 \xc3\x28 \xed\xa0\x80".decode("utf-8", "replace")
    lines: list[Any] = [garbage, "\ud800 lone surrogate", "\x00" * 50, None, 42, b"\xff\xfe"]
    assert classify(lines) == []
    tail: list[Any] = [garbage + OOM_LINE, b"RuntimeError: CUDA out of memory. \xff"]
    found = first_error([*lines, *tail])
    assert found is not None and found.cause is Cause.CUDA_OOM


def test_ansi_escapes_are_stripped() -> None:
    found = first_error(["\x1b[1;31m" + OOM_LINE + "\x1b[0m\x1b[K"])
    assert found is not None and found.cause is Cause.CUDA_OOM
    assert found.message is not None and "\x1b" not in found.message
    assert found.exception == "RuntimeError"


def test_progress_bar_redraws_before_an_error() -> None:
    bars = "\r".join(f"{p:3d}%|{'#' * (p // 10):<10}| {p}/100" for p in range(0, 60, 7))
    found = first_error([bars + "\r" + OOM_LINE])
    assert found is not None and found.cause is Cause.CUDA_OOM and found.line == 0


@pytest.mark.parametrize("tail", ["", "[rank0]: ", "[default3]:"])
def test_traceback_header_alone_at_eof(tail: str) -> None:
    assert classify([f"{tail}Traceback (most recent call last):"]) == []
    assert classify(["step 1", f"{tail}Traceback (most recent call last):"]) == []


def test_truncated_traceback_still_reports_where() -> None:
    lines = load("python_exception")[:-1]  # cut before the exception line
    found = first_error(lines)
    assert found is not None
    assert (found.cause, found.exception, found.location) == (Cause.TRACEBACK, None, "train.py:48")


def test_whole_text_instead_of_lines() -> None:
    text = "\n".join(load("cuda_oom_traceback"))
    found = first_error(text)
    assert found is not None and found.location == "train.py:228"


def test_only_the_first_max_lines_are_read() -> None:
    filler = ["ok"] * MAX_LINES
    assert first_error([*filler, OOM_LINE]) is None
    assert first_error([OOM_LINE, *filler]) is not None


@pytest.mark.parametrize(
    "line",
    [
        "]:1" * 1400,
        "[PG " * 1000,
        "gloo Connection " * 250,
        "nccl " * 800,
        "a FAILED " * 400,
        '  File "' + "a" * 3900 + '", line 1, in f',
        "Traceback (most recent call last): " * 100,
        "x" + " " * 3998 + "y",
        "/" * 3000 + "python: can't open file " * 40,
        "python3: " + "No module named " * 240,
        "SyntaxError: " * 300,
    ],
)
def test_hostile_log_is_bounded_in_time(line: str) -> None:
    start = time.monotonic()
    findings = classify([line] * MAX_LINES)
    assert time.monotonic() - start < 5.0
    assert all(isinstance(f, Finding) for f in findings)


def test_empty_input() -> None:
    assert classify([]) == [] and first_error([]) is None
    assert first_error(["", "   ", "\r\r"]) is None
