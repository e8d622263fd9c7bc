"""The pure parts of the headless watchdog's start (sessions/watch/detached.py): a Ctrl+C
waits out the step that creates its session and knows it, and the watcher's last words
reach a terminal bounded and printable."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from mntui.sessions.watch.detached import last_words, signals_deferred


def test_a_ctrl_c_inside_the_block_comes_after_it() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("the step ran to its end")
    assert done == ["the step ran to its end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nested_blocks_hold_it_until_the_outer_one_ends() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        done.append("after the inner block")
    assert done == ["after the inner block"]


def test_no_signal_no_change() -> None:
    with signals_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_last_words_are_this_watchers_last_line_printable(tmp_path: Path) -> None:
    log = tmp_path / "watch.log"
    log.write_bytes(b"an earlier watcher's line\n")
    start = log.stat().st_size
    assert last_words(log, start) == ""
    with open(log, "ab") as fh:
        fh.write(b"mntui: no recorded run \x1b[31mx\x07 of job t\n\n" + b"y" * 1000 + b"\r\n")
    said = last_words(log, start)
    assert said == "y" * 300
    with open(log, "ab") as fh:
        fh.write(b"mntui: no recorded run \x1b[2Jx\n")
    assert last_words(log, start) == "mntui: no recorded run x"  # the escape goes whole
    assert last_words(tmp_path / "none.log", 0) == ""


def test_no_local_tmux_is_a_watcher_failure_that_leaves_no_environment_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nodes need tmux, this machine may not: libtmux's TmuxCommandNotFound became an
    "internal error" and left watch.*.env (every variable, secrets too) in the run dir."""
    from mntui.sessions.config.jobconfig import parse_config
    from mntui.sessions.runs import NodeRecord, RunRecord
    from mntui.sessions.watch import WatcherFailed, start_detached

    cfg = parse_config("job: nt\nnodes: [n0]\ncommand: sleep 1\n", str(tmp_path / "c.yaml"))
    rec = RunRecord("nt", "20260101-000000-abcd", "c.yaml", "m", 1,
                    [NodeRecord("n0", "h", 0, "s", "t", "d")])  # fmt: skip
    rec.create()
    (tmp_path / "bin").mkdir()
    with monkeypatch.context() as m, pytest.raises(WatcherFailed, match="tmux could not start"):
        m.setenv("PATH", str(tmp_path / "bin"))  # a machine without tmux
        start_detached(cfg, rec, timeout=5)
    assert not list(rec.dir.glob("watch.*.env"))
