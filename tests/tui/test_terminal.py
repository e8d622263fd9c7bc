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
        # A node whose output shows may still be `starting` (the header counts it in
        # "running 2/2"): wait for what is asserted, both panes saying running.
        wait_for(
            lambda: (
                "running 2/2" in screen()
                and screen().count("serving") >= 2
                and all(re.search(rf"node{i} \[{i}\]\s+running", screen()) for i in (0, 1))
            ),
            40,
            what="both nodes running, with their output, on screen",
        )
        text = screen()
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
