"""A restart's main, ready for its workers by the launch's own rule (node/chain/readywait.py):
its port, its log matched by `grep -E` (the dialect the config checks at load, not
Python's), or a delay; a main that exits, or whose pane dies, before it is ready fails
the start at once, as the launch's ready check does. A real tmux session in the test's
own tmux server is the main's pane."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mntui.sessions.node.chain import readywait
from mntui.sessions.node.rules.judging import Rules
from mntui.sessions.node.wire.watchcfg import WatchConfig

RUN, NEXT = "20261126-101500-ab12", "20261126-101600-cd34"


class Board:
    """The coordinator's board as the wait sees it: pulsed each round (coordpeers.py)."""

    def __init__(self) -> None:
        self.pulses = 0

    def pulse(self) -> None:
        self.pulses += 1


class Asker:
    def __init__(self, cfg: WatchConfig, kill: bool = False) -> None:
        self.cfg, self.kill = cfg, kill
        self.done = threading.Event()
        self.board = Board()

    def kill_requested(self) -> tuple[float, str | None] | None:
        return (time.time(), None) if self.kill else None


@pytest.fixture
def main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, WatchConfig]:
    """The main's first run dir (attempt 1's file in it), attempt 1's run dir under a
    fake $HOME, its tmux session up, and the coordinator's watch config."""
    monkeypatch.setenv("HOME", str(tmp_path))
    first = tmp_path / ".mntui" / "runs" / "job" / RUN / "g0"
    run_dir = tmp_path / ".mntui" / "runs" / "job" / NEXT / "g0"
    (first / "attempts").mkdir(parents=True)
    run_dir.mkdir(parents=True)
    info = {"run": NEXT, "tag": f"job/{NEXT}/g0", "run_dir": f".mntui/runs/job/{NEXT}/g0"}
    (first / "attempts" / "1.json").write_text(json.dumps(info))
    (run_dir / "output.log").write_text("warming up\n")
    session = f"ready-{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "sleep 60"], check=True)
    cfg = WatchConfig(
        "job", RUN, "g0", f"job/{RUN}/g0", session, "127.0.0.1", 1,
        Rules(2.0, 3.0, "kill_all", "kill_all", 60.0), ("g0", "g1"), 0.5, 0.5, 0.5, (),
        60.0, ready_timeout=1.0,
    )  # fmt: skip
    return first, run_dir, cfg


def test_a_log_ready_main_is_matched_by_grep_e_not_by_python(
    main: tuple[Path, Path, WatchConfig],
) -> None:
    first, run_dir, cfg = main
    cfg = replace(cfg, ready="log", ready_pattern="^ready [[:digit:]]+$")
    c = Asker(cfg)
    t0 = time.monotonic()
    why = readywait.wait(c, str(first), 1)
    assert why == (
        "the main was not ready within 1s (waited for output matching '^ready [[:digit:]]+$')"
    )
    assert time.monotonic() - t0 >= 1.0
    assert c.board.pulses >= 4  # the coordinator's heartbeats go on while it waits
    with (run_dir / "output.log").open("a") as f:
        f.write("ready 12\n")  # a POSIX class: Python's re would read a set of characters
    assert readywait.wait(c, str(first), 1) is None


def test_a_main_that_exits_or_loses_its_pane_first_fails_at_once(
    main: tuple[Path, Path, WatchConfig],
) -> None:
    first, run_dir, cfg = main
    c = Asker(replace(cfg, ready="log", ready_pattern="^never$", ready_timeout=30.0))
    (run_dir / "exit_code").write_text("3\n")
    t0 = time.monotonic()
    assert readywait.wait(c, str(first), 1) == "the main exited before it was ready (exit code 3)"
    (run_dir / "exit_code").unlink()
    subprocess.run(["tmux", "kill-session", "-t", f"={cfg.session}"], check=True)
    assert readywait.wait(c, str(first), 1) == (
        "the main's tmux session is gone before it was ready"
    )
    assert time.monotonic() - t0 < 5.0  # neither waited out ready_timeout


def test_a_delay_a_port_and_the_users_kill(main: tuple[Path, Path, WatchConfig]) -> None:
    first, _, cfg = main
    t0 = time.monotonic()
    assert (
        readywait.wait(Asker(replace(cfg, ready="delay", ready_delay=0.4)), str(first), 1) is None
    )
    assert 0.4 <= time.monotonic() - t0 < 2.0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = replace(cfg, ready="port", master_port=s.getsockname()[1])
        assert readywait.wait(Asker(port), str(first), 1) is None
    killed = Asker(replace(cfg, ready="delay", ready_delay=30.0), kill=True)
    assert readywait.wait(killed, str(first), 1) == "the user's kill came first"
    assert readywait.wait(Asker(cfg), str(first), 2).startswith(  # no such attempt here
        "the main's attempt 2 cannot be followed"
    )
