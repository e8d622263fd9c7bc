"""Issue 18's small findings, each as the review reproduced it: an endless `\\r` progress
line (4), torchrun's reaction to our own SIGTERM (7), a Unicode digit in a hostfile (8).
(Finding 9 was the agent's, gone with it.)"""

from __future__ import annotations

import time

import pytest

from mntui.sessions.config import ConfigError, compile_pattern
from mntui.sessions.config.nodesource import parse_hostfile
from mntui.sessions.launch.logs import MAX_PENDING, LineSplitter
from mntui.sessions.node.rules.classify import first_error
from mntui.sessions.poll import NodeSnapshot, progress
from mntui.sessions.poll.pollscript import LOG_CHUNK
from mntui.sessions.report import Observations, observe

# -- finding 4: an unfinished line is bounded, and its last `\r` segment is progress ------

BAR = b"\r 42%|####      | step 4200/10000 [01:10<01:36, 60.00it/s]"


def tracked() -> Observations:
    pattern = compile_pattern(progress.DEFAULT_PATTERN)
    return Observations(tracker=progress.ProgressTracker(pattern))


def snap(node: str, data: bytes) -> NodeSnapshot:
    return NodeSnapshot(node=node, rank=0, at=time.time(), reachable=True, new_output=data)


def test_a_progress_bar_without_newline_is_bounded_and_its_step_is_read() -> None:
    """1600 polls of a full chunk of `\\r` redraws: 100 MiB kept whole and 1.2 -> 63 ms a
    poll before; now one segment is kept, and the bar's step is the node's progress."""
    obs = tracked()
    chunk = (BAR * (LOG_CHUNK // len(BAR) + 1))[:LOG_CHUNK]  # one poll's worth (64 KiB)
    costs = []
    for _ in range(1600):
        t0 = time.perf_counter()
        observe(obs, {"n0": snap("n0", chunk)}, {})
        costs.append(time.perf_counter() - t0)
    held = len(obs.splitters["n0"]._buf)
    first, last = sum(costs[:50]) / 50, sum(costs[-50:]) / 50
    print(
        f"\nheld {held} bytes; observe(): first polls {first * 1e3:.2f} ms, last {last * 1e3:.2f} ms"
    )
    assert held <= 1 << 20, f"{held} bytes of one unfinished line kept in memory"
    assert held <= len(BAR)  # the current segment only
    assert obs.splitters["n0"].dropped > 1500 * LOG_CHUNK
    assert obs.tracker is not None and obs.tracker.snapshot()["n0"].step == 4200
    assert obs.progress == "n0 at step 4200"


def test_the_splitter_keeps_the_current_segment_of_an_unfinished_line() -> None:
    s = LineSplitter()
    assert s.feed(b"a\nb") == ["a"] and s.feed(b"c\r\n") == ["bc"] and s.flush() == []
    assert s.feed(b"\rstep 1/9") == [] and s.pending() == "step 1/9"
    assert s.feed(b"\rstep 2/9\rstep 3/9") == [] and s.pending() == "step 3/9"
    assert s.feed(b"step 3/9 done\r") == [] and s.pending() == "step 3/9step 3/9 done"
    assert s.feed(b"step 4/9\r") == [] and s.pending() == "step 4/9"  # `\r` ended, not began
    assert s.feed(b"\rstep 9/9\nnext") == ["step 9/9"] and s.pending() == "next"  # latest state
    assert s.flush() == ["next"] and s.pending() == ""
    assert s.feed(b"\r 1%\r 2%\r100%\nx" + b"y" * MAX_PENDING + b"\n") == [
        "100%",
        "x" + "y" * (MAX_PENDING - 1),
    ]


def test_a_line_longer_than_the_limit_keeps_its_head_until_the_next_segment() -> None:
    s = LineSplitter()
    assert s.feed(b"x" * 100_000) == [] and len(s._buf) == MAX_PENDING
    assert s.dropped == 100_000 - MAX_PENDING
    assert s.feed(b"y" * 10) == [] and s.dropped == 100_010 - MAX_PENDING
    assert s.feed(b"\rz") == [] and s.pending() == "z"  # a redraw starts afresh
    assert s.feed(b"\n") == ["z"]
    assert s.feed(b"w" * (MAX_PENDING + 5) + b"\r") == [] and s.pending() == "w" * (MAX_PENDING - 1)
    assert s.feed(b"v\n") == ["v"]  # after the `\r` a new segment began: not dropped


def test_a_step_still_being_written_is_not_read_early() -> None:
    t = progress.ProgressTracker(compile_pattern(progress.DEFAULT_PATTERN))
    assert t.feed("n", [], 1.0, pending="step 42") is False  # maybe "step 4200" half sent
    assert t.feed("n", [], 2.0, pending="step 4200/10000") is True
    assert t.feed("n", [], 3.0, pending="step 4200/10000") is False  # redrawn, same step
    assert t.snapshot()["n"].step == 4200


def test_last_progress_moves_with_steps_not_with_output() -> None:
    """`reset_after` must count progress: a traceback is output, not progress."""
    obs = tracked()
    observe(obs, {"n0": snap("n0", b"step 1\n")}, {})
    stepped = obs.last_progress
    assert stepped is not None and obs.last_output == stepped
    time.sleep(0.01)
    observe(obs, {"n0": snap("n0", b"Traceback (most recent call last):\nRuntimeError: x\n")}, {})
    assert obs.last_output is not None and obs.last_output > stepped
    assert obs.last_progress == stepped
    observe(obs, {"n0": snap("n0", b"")}, {})
    assert obs.last_progress == stepped
    observe(obs, {"n0": snap("n0", b"\r step 2/10 [00:01]")}, {})  # a bar, no newline
    assert obs.last_progress is not None and obs.last_progress > stepped


# -- finding 7: torchrun's own SignalException after our SIGTERM is a consequence ---------


@pytest.mark.parametrize(
    "said",
    [
        "got signal: 15",
        "got signal: Signals.SIGTERM",
        "got signal: 1",
        "got signal: Signals.SIGHUP",
        "got signal: 2",
        "got signal: Signals.SIGINT",
    ],
)
def test_torchrun_own_sigterm_exception_is_a_consequence(said: str) -> None:
    # On Python >= 3.11 f"{Signals.SIGTERM}" is "15": the needle "Signals.SIGTERM" missed it.
    exc = f"torch.distributed.elastic.multiprocessing.api.SignalException: Process 123 {said}"
    log = [
        "Traceback (most recent call last):",
        '  File "/usr/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        exc,
    ]
    f = first_error(log)
    assert f is not None and f.secondary, f
    lone = first_error([exc])
    assert lone is not None and lone.secondary and "torchrun stopped by SIG" in lone.summary


def test_a_signal_torchrun_was_not_sent_by_us_stays_a_cause() -> None:
    for code, name in (("11", "SIGSEGV"), ("9", "SIGKILL"), ("12", "SIGUSR2")):
        f = first_error([f"SignalException: Process 1 got signal: {code}"])
        assert f is not None and not f.secondary and name in f.summary, f


# -- finding 8: ASCII digits only ---------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["\u00b2", "\u0663", "9" * 5000, "+4", "4_0"],
    ids=["superscript-2", "arabic-indic-3", "5000-digits", "plus", "underscore"],
)
def test_hostfile_slots_with_a_unicode_digit_is_a_config_error_not_a_traceback(
    value: str,
) -> None:
    # '²'.isdigit() is True and int('²') raises ValueError: `mntui nodes` said "internal error"
    with pytest.raises(ConfigError, match="expected slots=N"):
        parse_hostfile(f"g1 slots={value}\n", "hosts")
    assert parse_hostfile("g1 slots=4\n", "hosts")[0].slots == 4
