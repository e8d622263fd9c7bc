"""Launch/kill/cleanup/attach behaviour on real sshd nodes with a light job (no torch)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import libtmux
from fakecluster import FakeCluster, port_listening, tagged, wait_for
from helpers import Cfg, free_port, listener_job, terminal

from mntui.sessions.config import load_config
from mntui.sessions.launch import kill_job
from mntui.sessions.ssh import Cluster


def test_hostile_values_reach_the_job_literally(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    pwned = tmp_path / "pwned"
    hostile = f"$(touch {pwned}); `touch {pwned}`; '\"; touch {pwned}"
    work = tmp_path / """work dir "double" 'single' $(x)"""
    work.mkdir()
    path = cfg.write(f"""
    job: thostile
    nodes: [node0, node1]
    workdir: {json.dumps(str(work))}
    overrides:
      node1:
        env:
          HOSTILE: {json.dumps(hostile)}
    command: printf 'HOSTILE=%s\\n' "$HOSTILE"; printf 'PWD=%s\\n' "$PWD"; echo node={{node}}; sleep 300
    launch: {{ready: log, ready_pattern: "^node=", ready_timeout: 20}}
    """)
    res = cfg.mntui(path, "launch", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert not fake.node("node0").run_dirs("thostile"), "--dry-run must not touch the nodes"
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    log = wait_for(
        lambda: (
            "node=node1" in fake.node("node1").log("thostile")
            and fake.node("node1").log("thostile")
        ),
        10,
        what="node1 output",
    )
    assert f"HOSTILE={hostile}\n" in str(log)
    assert f"PWD={work}\n" in str(log)
    assert not pwned.exists(), "a config value was executed"
    assert cfg.mntui(path, "kill").returncode == 0


def test_refuses_when_running_and_restart_replaces_the_run(fake: FakeCluster, cfg: Cfg) -> None:
    port = free_port()
    path = cfg.write(listener_job("trestart", port))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    first = tagged("trestart", "node0")
    assert first
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1
    assert "already running" in res.stderr and "node0: pids" in res.stderr
    assert sorted(tagged("trestart", "node0")) == sorted(first), (
        "a refused launch must change nothing"
    )
    res = cfg.mntui(path, "launch", "--no-ui", "--restart")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not set(first) & set(tagged("trestart", "node0"))
    assert len(fake.node("node0").run_dirs("trestart")) == 2
    assert cfg.mntui(path, "kill").returncode == 0
    assert not port_listening(port)


def test_main_that_dies_aborts_the_launch_with_its_last_words(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write("""
    job: tdies
    nodes: [node0, node1]
    command: 'echo "fatal: CUDA out of memory on {node}"; exit 3'
    launch: {ready_timeout: 20}
    """)
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1
    assert "exited before it was ready (exit code 3)" in res.stderr
    assert "fatal: CUDA out of memory on node0" in res.stderr
    assert not fake.node("node1").run_dirs("tdies"), "the worker must not have been started"
    assert not [s for n in fake.nodes for s in n.sessions() if s.startswith("tdies")]


def test_ready_timeout_stops_the_main(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write("""
    job: tslow
    nodes: [node0, node1]
    command: echo never listening; sleep 300
    launch: {ready_timeout: 1.5}
    """)
    t0 = time.time()
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1 and "not ready within 1.5s" in res.stderr
    assert "never listening" in res.stderr
    assert time.time() - t0 < 15
    assert tagged("tslow", "node0") == [] and tagged("tslow", "node1") == []


def test_unreachable_node_fails_fast_and_starts_nothing(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    closed = free_port()
    extra = tmp_path / "extra_ssh_config"
    extra.write_text(
        f"Host deadnode\n    HostName 127.0.0.1\n    Port {closed}\n\nHost *\nInclude {fake.ssh_config}\n"
    )
    port = free_port()
    path = cfg.write(
        listener_job("tunreach", port, nodes="[node0, node1, deadnode]"),
        ssh=f"ssh: {{config: {extra}, connect_timeout: 3}}",
    )
    t0 = time.time()
    res = cfg.mntui(path, "launch", "--no-ui")
    took = time.time() - t0
    assert res.returncode == 1
    assert "deadnode: cannot connect to" in res.stderr and "nothing was started" in res.stderr
    assert took < 3 + 10
    assert tagged("tunreach", "node0") == [] and not fake.node("node0").sessions()
    # A kill with one dead node still reports on the others and fails overall.
    res = cfg.mntui(path, "kill")
    assert res.returncode == 1 and "deadnode" in res.stdout + res.stderr
    assert re.search(
        r"NOT CLEAN on deadnode; nothing of tunreach runs on node0, node1 \(", res.stderr
    )


def test_kill_continues_past_a_dead_node(fake: FakeCluster, cfg: Cfg, tmp_path: Path) -> None:
    """A node that dies after launch: the others are still killed, the dead one reported."""
    port = free_port()
    path = cfg.write(listener_job("tdeadmid", port))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config = load_config(path)
    broken = tmp_path / "broken_ssh_config"
    broken.write_text(f"Host node1\n    Port {free_port()}\n\nHost *\nInclude {fake.ssh_config}\n")
    from dataclasses import replace

    config = replace(config, ssh=replace(config.ssh, config=str(broken), connect_timeout=2))
    with Cluster(config.nodes, config.ssh) as cluster:
        results = kill_job(config, cluster)
    assert results["node0"].ok and results["node0"].value and results["node0"].value.clean
    assert not results["node1"].ok and "cannot connect" in (results["node1"].error or "")
    assert tagged("tdeadmid", "node0") == []
    assert cfg.mntui(path, "kill").returncode == 0


def test_cleanup_names_a_foreign_holder_and_frees_the_port(fake: FakeCluster, cfg: Cfg) -> None:
    port = free_port()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import socket, time; s = socket.socket(); "
            f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(300)",
            "old-run",
        ]
    )
    try:
        wait_for(lambda: port_listening(port), 10, what="holder listening")
        path = cfg.write(listener_job("tcleanup", port))
        res = cfg.mntui(path, "launch", "--no-ui")
        assert res.returncode == 1 and f"port {port} held by pid {holder.pid}" in res.stderr
        res = cfg.mntui(path, "cleanup")  # no terminal, no --yes: names, kills nothing
        assert res.returncode == 1 and f"pid {holder.pid}" in res.stdout and "old-run" in res.stdout
        assert holder.poll() is None
        res = cfg.mntui(path, "cleanup", "--yes")
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"killed {holder.pid}" in res.stdout
        wait_for(lambda: holder.poll() is not None, 10, what="holder gone")
        assert not port_listening(port)
        assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
        assert cfg.mntui(path, "kill").returncode == 0
    finally:
        holder.kill()
        holder.wait()


def test_host_keys_are_checked(fake: FakeCluster, cfg: Cfg, tmp_path: Path) -> None:
    node = fake.node("node0")
    known = tmp_path / "known_hosts"
    conf = tmp_path / "ssh_config"
    conf.write_text(
        f"Host node0\n    UserKnownHostsFile {known}\n\nHost *\nInclude {fake.ssh_config}\n"
    )
    body = """
    job: thostkey
    nodes: [node0]
    command: sleep 300
    launch: {ready: delay, ready_delay: 0}
    """
    # Unknown key, strict: refused, clearly.
    path = cfg.write(body, ssh=f"ssh: {{config: {conf}, connect_timeout: 5}}")
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1 and "not in known_hosts" in res.stderr, res.stderr
    # accept-new: recorded, then used.
    path = cfg.write(body, ssh=f"ssh: {{config: {conf}, connect_timeout: 5, host_key: accept-new}}")
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stderr
    assert f"[127.0.0.1]:{node.port}" in known.read_text()
    assert cfg.mntui(path, "kill").returncode == 0
    # Changed key: refused even with accept-new.
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known.write_text(
        f"[127.0.0.1]:{node.port} "
        + " ".join(other.with_suffix(".pub").read_text().split()[:2])
        + "\n"
    )
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1 and "HOST KEY CHANGED" in res.stderr


def test_attach_argv_and_a_real_attach(fake: FakeCluster, cfg: Cfg, tmp_path: Path) -> None:
    path = cfg.write("""
    job: tattach
    nodes: [node0, node1, {name: here, host: localhost}]
    command: echo "hello from {node} rank {node_rank}"; sleep 300
    launch: {ready: log, ready_pattern: hello}
    """)
    res = cfg.mntui(path, "attach", "node1", "--print")
    assert (
        res.stdout.strip()
        == f"ssh -F {fake.ssh_config} -t -- node1 'exec tmux attach-session -t =tattach-node1'"
    )
    assert (
        cfg.mntui(path, "attach", "--print")
        .stdout.strip()
        .endswith("-- node0 'exec tmux attach-session -t =tattach-node0'")
    )
    assert (
        cfg.mntui(path, "attach", "here", "--print").stdout.strip()
        == "tmux attach-session -t =tattach-here"
    )
    env = {**os.environ, "TMUX": "/tmp/x,1,0"}
    assert (
        cfg.mntui(path, "attach", "here", "--print", env=env).stdout.strip()
        == "tmux switch-client -t =tattach-here"
    )
    assert cfg.mntui(path, "attach", "nope").returncode == 2

    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    # A real terminal: a pane of a private tmux server runs `mntui attach node1`.
    with terminal(tmp_path / "outer.sock") as server:
        cmd = shlex.join(
            [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "attach", "node1"]
        )
        session = server.new_session("outer", window_command=f"env -u TMUX {cmd}", x=120, y=30)
        pane = session.active_pane
        assert pane is not None
        wait_for(
            lambda: "hello from node1 rank 1" in "\n".join(pane.capture_pane()),
            15,
            what="node1's pane shown through ssh + tmux attach",
        )
        # The node's tmux server sees the client.
        clients = fake.node("node1").tmux("list-clients", "-F", "#{client_session}").stdout
        assert "tattach-node1" in clients
        pane.send_keys("C-b", enter=False, literal=False)
        pane.send_keys("d", enter=False)
        wait_for(
            lambda: not fake.node("node1").tmux("list-clients").stdout.strip(), 10, what="detached"
        )
    assert cfg.mntui(path, "kill").returncode == 0


def test_attach_all_builds_a_tiled_view(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write("""
    job: ttiled
    nodes: [node0, node1]
    command: echo "tiled {node}"; sleep 300
    launch: {ready: log, ready_pattern: tiled}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    res = cfg.mntui(path, "attach", "--all", "--print")
    assert res.returncode == 0 and res.stdout.strip() == "tmux attach-session -t =mntui@all-ttiled"
    server = libtmux.Server()  # the test's private TMUX_TMPDIR server
    session = server.sessions.get(session_name="mntui@all-ttiled")
    assert session is not None
    panes = session.active_window.panes
    assert len(panes) == 2
    for p, node in zip(panes, ("node0", "node1"), strict=False):
        wait_for(
            lambda p=p, node=node: f"tiled {node}" in "\n".join(p.capture_pane()),
            15,
            what=f"{node} in its tile",
        )
    session.kill()
    assert cfg.mntui(path, "kill").returncode == 0


def test_launch_survives_interrupt_without_leftovers(fake: FakeCluster, cfg: Cfg) -> None:
    """Ctrl+C (SIGINT) while waiting for the main: what was started is stopped."""
    path = cfg.write("""
    job: tinterrupt
    nodes: [node0, node1]
    command: echo waiting forever; sleep 300
    launch: {ready_timeout: 60}
    """)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--no-ui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(lambda: tagged("tinterrupt", "node0"), 20, what="main started")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert tagged("tinterrupt", "node0") == [] and tagged("tinterrupt", "node1") == []
    assert "aborted" in out


def test_proxyjump_reaches_a_node_through_another(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """`ProxyJump` from the user's ssh_config is honoured: behind -> via node0 -> node1's sshd."""
    conf = tmp_path / "jump_config"
    conf.write_text(
        f"Host behind\n    HostName 127.0.0.1\n    Port {fake.node('node1').port}\n"
        f"    ProxyJump node0\n\nHost *\nInclude {fake.ssh_config}\n"
    )
    path = cfg.write(
        """
    job: tjump
    nodes: [{name: behind, host: behind}]
    command: echo "reached $MNTUI_FAKE_NODE"; sleep 300
    launch: {ready: log, ready_pattern: reached}
    """,
        ssh=f"ssh: {{config: {conf}, connect_timeout: 5}}",
    )
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    # It ran on node1 (node1's tmux server holds the session), reached through node0.
    assert "tjump-behind" in fake.node("node1").sessions()
    assert cfg.mntui(path, "kill").returncode == 0
    assert not fake.node("node1").sessions()
