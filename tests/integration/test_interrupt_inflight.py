"""Ctrl+C while a command is in flight on a node (chaos seed 28, fault #97: Ctrl+C right
after `connected`, during the preflight). The launch said "interrupted before any node
... was started" and then never exited: closing the node left the paramiko reader
waiting for an EOF that a closed channel never gets, until the command's deadline (60 s),
and the interpreter joins the pool's threads before it exits."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg, free_port, listener_job

from mntui.sessions.config import NodeSpec, SshPolicy, SshTransport
from mntui.sessions.results import NodeError
from mntui.sessions.runs import latest
from mntui.sessions.ssh import Cluster

EXIT_WITHIN = 20.0  # seconds; before the fix the launch waited out the 60 s command deadline


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    """node0's `ss` (the main's preflight reads its ports with it) says it started and
    answers only once the test lets it: the Ctrl+C lands while the preflight is in flight,
    every time."""
    root = tmp_path_factory.mktemp("held")
    shim = root / "bin"
    shim.mkdir()
    real = shutil.which("ss") or "/usr/bin/ss"
    started, release = shlex.quote(str(root / "ss.started")), shlex.quote(str(root / "ss.release"))
    (shim / "ss").write_text(
        f"#!/bin/sh\n: >{started}\ni=0\n"
        f'while [ ! -e {release} ] && [ "$i" -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done\n'
        f'exec {shlex.quote(real)} "$@"\n'
    )
    (shim / "ss").chmod(0o755)
    path = os.pathsep.join([str(shim), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    with FakeCluster(root / "fc", 2, prefix="hnode", node_env={"hnode0": {"PATH": path}}) as fc:
        try:
            yield fc
        finally:
            (root / "ss.release").touch()


def test_ctrl_c_during_the_preflight_exits_at_once(held: FakeCluster, tmp_path: Path) -> None:
    job = "hsint"
    path = Cfg(held, tmp_path).write(listener_job(job, free_port(), nodes="[hnode0, hnode1]"))
    out, err = tmp_path / "launch.out", tmp_path / "launch.err"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--no-ui"],
            stdout=o,
            stderr=e,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
    try:
        wait_for(lambda: " connected" in out.read_text(), 60, 0.01, what="the launch connected")
        wait_for((held.root.parent / "ss.started").exists, 30, 0.01, what="the preflight")
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl+C
        try:
            proc.wait(EXIT_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"launch still running {EXIT_WITHIN:g}s after Ctrl+C: {err.read_text()}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    said = err.read_text()
    assert proc.returncode == 130, out.read_text() + said
    assert "Traceback" not in said, said
    assert said.strip().splitlines()[-1] == (
        f"mntui: interrupted before any node of {job} was started"
    ), said
    assert latest(job) is None  # interrupted before the run was recorded: nothing to record
    assert not tagged(job)


@pytest.mark.parametrize("transport", list(SshTransport))
def test_closing_a_node_ends_its_command_in_flight(
    fake: FakeCluster, transport: SshTransport
) -> None:
    """The depth of the hang: a command running when its node is closed ends at once, with
    a NodeError, never at its deadline."""
    marker = fake.node("node0").home / f"inflight-{transport.value}"
    marker.unlink(missing_ok=True)
    policy = SshPolicy(config=str(fake.ssh_config), connect_timeout=5, transport=transport)
    cluster = Cluster([NodeSpec("node0", "node0", 0, "true", {}, (), None)], policy)
    node = cluster.nodes["node0"]
    assert node.run(":").ok  # connected, its shell started
    raised: list[BaseException] = []

    def run() -> None:
        try:
            node.run(f": >{shlex.quote(str(marker))}; sleep 120", timeout=240)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(marker.exists, 30, 0.01, what="the command running")
    finally:
        cluster.close()
    thread.join(EXIT_WITHIN)
    assert not thread.is_alive(), f"the command outlived its node's close by {EXIT_WITHIN:g}s"
    assert len(raised) == 1 and isinstance(raised[0], NodeError), raised
