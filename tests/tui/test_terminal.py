"""The app in a real terminal: a tmux pane runs `mntui`, driven by send-keys, read by capture-pane."""

from __future__ import annotations

import re
import shlex
import sys

import libtmux
from fakecluster import FakeCluster, port_listening, tagged, wait_for
from helpers import Cfg, free_port, listener_job


def test_app_in_a_terminal_shows_nodes_and_kills(fake: FakeCluster, cfg: Cfg) -> None:
    port = free_port()
    path = cfg.write(listener_job("tterm", port))
    server = libtmux.Server()  # the test's private TMUX_TMPDIR server
    cmd = shlex.join([sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch"])
    session = server.new_session("app", window_command=f"{cmd}; sleep 60", x=160, y=45)
    pane = session.active_pane
    assert pane is not None

    def screen() -> str:
        return "\n".join(pane.capture_pane())

    try:
        wait_for(
            lambda: "running 2/2" in screen() and screen().count("serving") >= 2,
            40,
            what="both nodes running, with their output, on screen",
        )
        text = screen()
        assert re.search(r"node0 \[0\]\s+running", text) and re.search(
            r"node1 \[1\]\s+running", text
        )
        assert "K kill all" in text.replace("  ", " ")
        assert tagged("tterm")
        pane.send_keys("K", enter=False)
        wait_for(lambda: "Kill tterm on all 2 node(s)?" in screen(), 10, what="the confirm dialog")
        pane.send_keys("y", enter=False)
        wait_for(lambda: not tagged("tterm"), 20, what="the job gone from the nodes")
        wait_for(lambda: "clean:" in screen(), 10, what="the kill reported on screen")
        assert not port_listening(port)
        pane.send_keys("q", enter=False)
        wait_for(lambda: "tterm is not running (run " in screen(), 10, what="the app quit")
    finally:
        session.kill()
