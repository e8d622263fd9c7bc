"""The run's agent on real sshd nodes: the watchdog process serves status, logs, kill,
report and a snapshot stream; a stale socket sends every command back to direct
connections; the app follows the agent instead of polling. Timing lives in the bench."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakecluster import FakeCluster, alive, pids_with_env, port_listening, process_tree, wait_for
from helpers import HERE_WATCH, Cfg, free_port, listener_job

from mntui.sessions.agent import client as agentclient
from mntui.sessions.agent import place as agentplace
from mntui.sessions.config import load_config
from mntui.sessions.poll import NodeState, Poller, derive
from mntui.sessions.runs import RunRecord, latest
from mntui.sessions.ssh import Cluster


def tagged(job: str, node: str = "[^/]+") -> list[int]:
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{node}"))


def launched_with_agent(cfg: Cfg, job: str) -> tuple[Path, RunRecord, int]:
    """A light 2-node job and its watchdog; returns once the agent answers a status."""
    port = free_port()
    path = cfg.write(listener_job(job, port, extra=HERE_WATCH))
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    record = latest(job)
    assert record is not None

    def answers() -> bool:
        client, _ = agentclient.try_connect(record.dir)
        if client is None:
            return False
        with client:
            try:
                agentclient.fetch_status(client, record.run_id, ["node0", "node1"])
            except agentplace.AgentUnavailable:
                return False
        return True

    wait_for(answers, 30, interval=0.2, what="the agent's first status")
    return path, record, port


def test_agent_serves_status_logs_report_and_kill_to_several_clients(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "agentops"
    path, record, port = launched_with_agent(cfg, job)
    wait_for(lambda: "serving" in fake.node("node1").log(job), 20, what="output")
    subscriber = agentclient.AgentClient.connect(record.dir)
    subscriber.send("subscribe", run=record.run_id, back=4096)
    stream = subscriber.stream(first=5, timeout=10)
    assert next(stream)["run_id"] == record.run_id
    backlog = next(stream)
    assert backlog["kind"] == "backlog" and set(backlog["logs"]) == {"node0", "node1"}

    res = cfg.mntui(path, "status", "--json", "--verbose")
    data = json.loads(res.stdout)
    assert data["via"] == "agent" and "via the run's agent" in res.stderr, res.stderr
    n0 = data["nodes"][0]
    assert {p["pid"] for p in n0["procs"]} == set(tagged(job, "node0"))
    assert port in n0["ports"] and n0["state"] == "running"
    assert next(stream)["kind"] == "snapshot"  # the second client still gets the stream

    res = cfg.mntui(path, "logs", "-n", "1", "node1", "-v")
    assert res.stdout.splitlines() == ["serving"] and "agent" in res.stderr, res
    res = cfg.mntui(path, "report", "--json", "-v")
    assert json.loads(res.stdout)["via"] == "agent" and res.returncode == 0, res.stderr

    res = cfg.mntui(path, "kill", "-v")
    assert res.returncode == 0 and "via the run's agent" in res.stderr, res.stderr
    assert re.search(r"clean: \d+ process\(es\) of agentops stopped on 2 node", res.stdout)
    assert not tagged(job) and not port_listening(port)
    assert latest(job).status == "killed"  # type: ignore[union-attr]
    kinds = [m.get("kind") for m in stream_until_end(stream)]
    assert kinds[-1] == "end"
    subscriber.close()
    wait_for(lambda: not (record.dir / agentplace.AGENT_FILE).exists(), 15, what="agent gone")
    assert agentclient.try_connect(record.dir)[0] is None


def stream_until_end(stream: Any) -> list[dict[str, Any]]:
    out = []
    try:
        for msg in stream:
            out.append(msg)
            if msg.get("kind") == "end":
                break
    except agentplace.AgentUnavailable:
        pass
    return out


def test_a_stale_socket_falls_back_to_direct_connections(fake: FakeCluster, cfg: Cfg) -> None:
    job = "agentstale"
    path, record, port = launched_with_agent(cfg, job)
    _, pid = agentplace.read_agent_file(record.dir)
    assert pid in alive([pid])
    other = _nobody()
    if other is not None:  # another user cannot even reach the socket's directory
        sock_path, _ = agentplace.read_agent_file(record.dir)
        probe = "import socket; socket.socket(socket.AF_UNIX).connect(__import__('sys').argv[1])"
        res = subprocess.run(
            [*other, "/usr/bin/python3", "-c", probe, str(sock_path)],
            capture_output=True,
            text=True,
        )
        assert res.returncode != 0 and "PermissionError" in res.stderr, res
    os.kill(pid, signal.SIGKILL)  # the agent we started, by its PID
    wait_for(lambda: not alive([pid]), 10, what="agent dead")
    # Refused at once; or, while the kernel still closes a dying process' sockets (its
    # main thread a zombie already), accepted and never answered: FIRST_REPLY, then direct.
    res = cfg.mntui(path, "status", "--json", "-v")
    data = json.loads(res.stdout)
    assert data["via"] == "direct" and re.search(STALE, res.stderr), res.stderr
    assert {p["pid"] for p in data["nodes"][1]["procs"]} == set(tagged(job, "node1"))
    res = cfg.mntui(path, "logs", "-n", "1", "node0", "-v")
    assert res.stdout.splitlines() == ["serving"] and "direct" in res.stderr
    res = cfg.mntui(path, "kill", "-v")
    assert res.returncode == 0 and "direct connections" in res.stderr, res.stderr
    assert not tagged(job) and not port_listening(port)
    agentplace.read_agent_file(record.dir)[0].unlink()  # the socket file we left stale


STALE = r"stale socket, the agent is gone|did not answer in time"


def _nobody() -> list[str] | None:
    """A command prefix that runs as user `nobody` (we are root here), or None."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"]


def test_the_app_follows_the_agent_instead_of_polling(fake: FakeCluster, cfg: Cfg) -> None:
    from mntui.tui.app.main import MntuiApp

    job = "agentapp"
    path, _, _ = launched_with_agent(cfg, job)
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config)
        async with app.run_test(size=(160, 48)) as pilot:
            deadline = time.monotonic() + 30
            while not (
                app.agent_snaps >= 3
                and all(any("serving" in ln for ln in v.log or []) for v in app.views.values())
            ):
                assert time.monotonic() < deadline, (app.agent_snaps, app.watcher)
                await pilot.pause(0.1)
            assert app.watcher == "headless (agent)" and app.lock is None
            assert app.poller is not None and app.poller.polls == 0  # one poll stream
            assert all(v.verdict.state is NodeState.RUNNING for v in app.views.values())  # type: ignore[union-attr]

    asyncio.run(go())
    assert cfg.mntui(path, "kill").returncode == 0


def test_a_new_child_and_a_reparented_one_are_seen_on_the_next_poll(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """Between full scans the poll walks the known PIDs' tree: a process the job starts
    shows on the next poll, and so does its parent's death (ORPHANED)."""
    job, go, stop = "reaction", tmp_path / "go", tmp_path / "stop"
    path = cfg.write(f"""
    job: {job}
    nodes: [node0]
    command: >-
      echo up; while [ ! -f {go} ]; do sleep 0.05; done; sleep 600 &
      while [ ! -f {stop} ]; do sleep 0.05; done; echo bye
    launch: {{ready: log, ready_pattern: up, ready_timeout: 20}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config, record = load_config(path), latest(job)
    assert record is not None
    with Cluster(config.nodes, config.ssh) as cluster:
        poller = Poller(record, cluster, gpus=False)
        first = poller.poll()["node0"]  # the full scan
        go.touch()
        sleeper = wait_for(lambda: _sleep_600(job), 10, what="the new child")
        second = poller.poll()["node0"]
        assert sleeper in {p.pid for p in second.procs}, (first.procs, second.procs)
        stop.touch()  # the subshell exits: its `sleep 600` is reparented, still tagged
        wait_for(lambda: _ppid(sleeper) == 1 or _ppid(sleeper) not in _tagged_set(job), 10)
        third = poller.poll()["node0"]
        assert poller.polls == 3  # no full scan since the first
        verdict = derive(third, 300)
        assert verdict.state is NodeState.ORPHANED and str(sleeper) in verdict.why, third.procs
    assert cfg.mntui(path, "kill").returncode == 0


def test_a_hung_node_holds_back_no_other_node(fake: FakeCluster, cfg: Cfg) -> None:
    """A node whose sshd stopped answering is unreachable after `round_wait`, not after
    the 20 s command timeout, and is not asked again while its poll is still out."""
    job = "hung"
    path = cfg.write(listener_job(job, free_port(), nodes="[node0, node2]"))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config, record = load_config(path), latest(job)
    assert record is not None
    with Cluster(config.nodes, config.ssh) as cluster:
        poller = Poller(record, cluster, gpus=False)
        poller.round_wait = 1.0
        assert all(s.reachable for s in poller.poll().values())
        sshd = process_tree(fake.node("node2").proc.pid)  # type: ignore[union-attr]  # and our session
        try:
            for pid in sshd:
                os.kill(pid, signal.SIGSTOP)
            for _ in range(2):
                snaps = poller.poll()
                assert snaps["node0"].reachable and not snaps["node2"].reachable
                assert "poll still running" in (snaps["node2"].error or "")
            assert poller._state["node2"].polls == 2  # the hung poll was not sent again
        finally:
            for pid in sshd:
                os.kill(pid, signal.SIGCONT)
        wait_for(lambda: poller.poll()["node2"].reachable, 30, what="node2 back")
    assert cfg.mntui(path, "kill").returncode == 0


def _sleep_600(job: str) -> int | None:
    for pid in tagged(job):
        if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00600\x00":
            return pid
    return None


def _tagged_set(job: str) -> set[int]:
    return set(tagged(job))


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


pytestmark = pytest.mark.timeout(240)


def test_the_agent_bench_rows_keep_running(tmp_path: Path) -> None:
    """`bench.py --cold` at N = 2, one repetition: it runs and prints its table (timings
    are not judged here)."""
    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, str(repo / "bench" / "bench.py"), "--cold", "2", "--cold-reps", "1",
         "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "`mntui status --json`, agent" in res.stdout and "no agent" in res.stdout
    data = json.loads(next(tmp_path.glob("agent-*.json")).read_text())
    assert set(data["cold"]["2"]) >= {"`mntui kill`, agent", "`mntui kill`, no agent"}
