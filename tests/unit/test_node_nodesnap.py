"""A node as its sentinel sees it for `status` (node/sentinel/nodesnap.py, node/proc/listens.py,
node/wire/nodewire.py): real processes' CPU, memory and command lines, the ports they listen
on, sent when changed, bounded, checked by the coordinator and kept on its board
(coord/nodes.json) within its size.

Real processes and sockets of this machine; the bounds and what a hostile /proc holds
on a /proc-shaped folder, since this machine never writes it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakecluster import wait_for
from test_node_watchfiles import GOOD, _cfg, _Channel

from mntui.sessions.node.board.coordstate import Board, Peer
from mntui.sessions.node.proc import listens
from mntui.sessions.node.sentinel import nodesnap
from mntui.sessions.node.wire import nodewire
from mntui.sessions.node.wire.facts import Facts, Malformed, ProcFact

T = 30.0
BURN = "import sys, time\nt = time.monotonic()\nwhile time.monotonic() - t < 600: pass\n"
LISTEN = (
    "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
    "print(s.getsockname()[1], flush=True)\ntime.sleep(600)\n"
)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def start(started: list[subprocess.Popen[str]], code: str, *argv: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, text=True)
    started.append(p)
    return p


def facts_of(*pids: int) -> Facts:
    live = tuple(ProcFact(p, 1, "S") for p in pids)
    return Facts(True, None, live, pids[0] if pids else None, None, True, False, 42, 1.25)


def test_a_snapshot_holds_what_a_poll_reads_of_real_processes(
    procs: list[subprocess.Popen[str]],
) -> None:
    burner = start(procs, BURN, "mark\x1b]52;c;ZXZpbA==\x07\x1b[2J-end")
    listener = start(procs, LISTEN)
    stranger = start(procs, LISTEN)  # ours too, but not followed: its port is not the job's
    assert listener.stdout is not None and stranger.stdout is not None
    port, other = int(listener.stdout.readline()), int(stranger.stdout.readline())
    b = nodesnap.Builder()
    f = facts_of(burner.pid, listener.pid)
    first = b.build(f, time.monotonic())
    assert [p["pid"] for p in first["procs"]] == sorted([burner.pid, listener.pid])
    assert all(p["cpu_percent"] is None for p in first["procs"])  # first sight, as a poll's
    assert first["ports"] == [port] and other not in first["ports"]
    cmd = next(p["cmdline"] for p in first["procs"] if p["pid"] == burner.pid)
    assert cmd.startswith(f"{sys.executable} -c import sys") and cmd.endswith("mark-end")
    assert "\x1b" not in cmd and "\x07" not in cmd
    assert first["ncpu"] >= 1 and len(first["load"]) == 3 and first["mem_total_mib"] > 0
    assert 0 < first["mem_available_mib"] <= first["mem_total_mib"]
    assert (first["session"], first["pane_pid"], first["log_size"]) == (True, burner.pid, 42)
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 > 0.5, 5, what="some CPU burnt")
    second = b.build(f, time.monotonic())
    burnt = next(p for p in second["procs"] if p["pid"] == burner.pid)
    assert burnt["cpu_percent"] > 5 and burnt["rss_mib"] > 1, burnt
    assert b.cmdlines.keys() == {(p, s) for p, (s, _, _) in b.ticks.items()}  # read once
    burner.kill()
    burner.wait()
    third = b.build(f, time.monotonic())
    assert [p["pid"] for p in third["procs"]] == [listener.pid]
    assert [pid for pid, _ in b.cmdlines] == [listener.pid]  # the gone forgotten
    assert nodewire.check({**third, "age": 0.0}, "age")["ports"] == [port]


def test_a_port_opened_later_is_found_at_the_next_look(procs: list[subprocess.Popen[str]]) -> None:
    later = "import socket, sys, time\nsys.stdin.readline()\n" + LISTEN.split("\n", 1)[1]
    p = subprocess.Popen(
        [sys.executable, "-c", later], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    procs.append(p)
    assert p.stdin is not None and p.stdout is not None
    ports = listens.Ports()
    key = [(p.pid, 0)]
    assert ports.of(key, 0.0) == ()
    p.stdin.write("go\n")
    p.stdin.flush()
    port = int(p.stdout.readline())
    assert ports.of(key, 1.0) == (port,)  # a new listening socket: every fd looked at again
    assert ports.of(key, 2.0) == (port,)  # and then from what was found


def test_the_kernels_listening_sockets_are_those_proc_net_tcp_lists() -> None:
    with socket.socket() as s, socket.socket(socket.AF_INET6) as s6:
        s.bind(("127.0.0.1", 0))
        s.listen()
        s6.bind(("::1", 0))
        s6.listen()
        mine = {s.getsockname()[1], s6.getsockname()[1]}
        by_netlink = {x for x in listens.listening() if x.port in mine}
        by_file: set[listens.Listen] = set()
        for name in ("tcp", "tcp6"):
            by_file |= set(listens.rows(Path(f"/proc/net/{name}").read_text()))
        assert by_netlink == {x for x in by_file if x.port in mine}
        assert {x.uid for x in by_netlink} == {os.getuid()} and len(by_netlink) == 2


def fake_proc(root: Path, pids: range, cmd: bytes = b"x", mem: str = "2048") -> Path:
    for pid in pids:
        d = root / str(pid)
        d.mkdir(parents=True)
        line = f"{pid} (x) S 1 {pid} {pid} 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 100 0 250"
        (d / "stat").write_text(line + " 0 0\n")
        (d / "cmdline").write_bytes(cmd)
    (root / "loadavg").write_text("0.50 0.25 0.10 1/99 123\n")
    (root / "meminfo").write_text(f"MemTotal: 2048 kB\nMemAvailable: {mem} kB\n")
    return root


def test_a_snapshot_is_bounded_and_what_proc_says_is_data(tmp_path: Path) -> None:
    many = range(100, 100 + nodewire.MAX_PROCS + 50)
    root = fake_proc(tmp_path / "proc", many, cmd=b"python\0-c\0" + b"y" * 5000, mem="oops")
    (root / "100" / "stat").write_text("100 (x) S not-a-stat-line\n")
    b = nodesnap.Builder(str(root))
    snap = b.build(facts_of(*many), 1.0)
    assert len(snap["procs"]) == nodewire.MAX_PROCS - 1 and b.malformed == 2  # stat, meminfo
    assert all(len(p["cmdline"]) <= nodewire.CMD_MAX for p in snap["procs"])
    assert snap["procs"][0]["cmdline"].startswith("python -c yyy")
    assert (snap["load"], snap["mem_total_mib"], snap["mem_available_mib"]) == (
        [0.5, 0.25, 0.1], 2.0, None,
    )  # fmt: skip
    entry, text = nodewire.fit({**snap, "age": 0.0}, nodewire.ENTRY_MAX)
    assert len(text) <= nodewire.ENTRY_MAX and nodewire.check(entry, "age")["procs"]
    assert all(len(p["cmdline"]) <= nodewire.SHORT_CMD for p in entry["procs"])


def test_a_snapshot_goes_when_it_changed_or_after_resend(tmp_path: Path) -> None:
    root = fake_proc(tmp_path / "proc", range(10, 12))
    out = nodesnap.Outbox(nodesnap.Builder(str(root)))
    f = facts_of(10, 11)
    assert out.fields(None, 0.0) == {}  # no sample yet
    first = out.fields(f, 0.0)["node"]
    assert first["age"] == 0.0 and [p["cpu_percent"] for p in first["procs"]] == [None, None]
    every, resend = nodesnap.EVERY, nodesnap.RESEND
    assert out.fields(f, every / 2) == {}  # built every EVERY seconds
    assert [p["cpu_percent"] for p in out.fields(f, every)["node"]["procs"]] == [0.0, 0.0]
    assert out.fields(f, 2 * every) == {}  # the same but for the clock
    assert "node" in out.fields(f, every + resend)  # unchanged, RESEND seconds after
    changed = Facts(True, None, f.live_procs, 10, 3, True, True, 42, 1.25)
    assert out.fields(changed, 2 * every + resend)["node"]["exit_code"] == 3


def snap_msg(wc: Any, node: object) -> dict[str, Any]:
    return {"k": "snap", "run": wc.run, "age": 0.1, "facts": GOOD, "steps": {}, "node": node}


GOOD_NODE: dict[str, Any] = {
    "procs": [{"pid": 10, "ppid": 1, "state": "S", "cpu_percent": 1.5, "rss_mib": 3.0,
               "cmdline": "python train.py"}],
    "ports": [29500], "load": [0.5, 0.2, 0.1], "ncpu": 8, "mem_total_mib": 1000.0,
    "mem_available_mib": 500.0, "node_time": 1.7e9, "session": True, "pane_dead": False,
    "pane_pid": 10, "exit_code": None, "log_size": 100, "output_age": 0.5, "malformed": 0,
    "age": 0.2,
}  # fmt: skip


@pytest.mark.parametrize(
    "bad",
    [
        5,
        {**GOOD_NODE, "extra": 1},
        {k: v for k, v in GOOD_NODE.items() if k != "ports"},
        {**GOOD_NODE, "ncpu": True},
        {**GOOD_NODE, "load": [1.0, float("nan"), 1.0]},
        {**GOOD_NODE, "ports": [0]},
        {**GOOD_NODE, "ports": list(range(1, nodewire.MAX_PORTS + 2))},
        {**GOOD_NODE, "procs": [{**GOOD_NODE["procs"][0], "cmdline": "a\x1b[2Jb"}]},
        {**GOOD_NODE, "procs": [{**GOOD_NODE["procs"][0], "state": "SS"}]},
        {**GOOD_NODE, "procs": [{**GOOD_NODE["procs"][0], "pid": "10"}]},
        {**GOOD_NODE, "procs": [GOOD_NODE["procs"][0]] * (nodewire.MAX_PROCS + 1)},
        {**GOOD_NODE, "age": -1},
    ],
)
def test_a_snapshot_of_another_shape_is_malformed(bad: Any) -> None:
    with pytest.raises(Malformed):
        nodewire.check(bad, "age")


def test_the_board_keeps_each_nodes_snapshot_counts_a_bad_one_and_keeps_the_facts(
    tmp_path: Path,
) -> None:
    wc = _cfg()
    board = Board(wc, str(tmp_path / "coord"))
    peer = Peer("n1", _Channel())  # type: ignore[arg-type]
    board.heard(peer, snap_msg(wc, GOOD_NODE))
    board.heard(peer, snap_msg(wc, {**GOOD_NODE, "ncpu": "8"}))
    assert board.malformed == 1 and "n1" in board.words
    board.publish({}, time.monotonic(), force=True)
    path = tmp_path / "coord" / nodewire.BOARD_FILE
    entry = json.loads(path.read_text())["nodes"]["n1"]
    assert entry["ports"] == [29500] and abs(entry["at"] - (time.time() - 0.2)) < 5
    written = path.stat().st_mtime_ns
    board.publish({}, time.monotonic(), force=True)
    assert path.stat().st_mtime_ns == written  # nothing new: not written again
    board.new_attempt(1, "another")
    board.publish({}, time.monotonic(), force=True)
    assert json.loads(path.read_text())["nodes"] == {}  # the attempt's processes


def test_the_board_of_many_big_nodes_stays_within_its_bound() -> None:
    proc = {"pid": 1, "ppid": 1, "state": "S", "cpu_percent": 0.0, "rss_mib": 1.0}
    procs = [{**proc, "pid": i + 1, "cmdline": "é" * nodewire.CMD_MAX} for i in range(256)]
    big = nodewire.board_entry({**GOOD_NODE, "procs": procs}, time.time())
    assert len(big) <= nodewire.ENTRY_MAX and json.loads(big)["procs"]
    for n in (128, 400):  # 400: each over its share of the board loses processes
        text = nodewire.board_text(1.0, {f"node{i:03d}": big for i in range(n)})
        entries, bad = nodewire.from_board(json.loads(text))
        assert len(text) <= nodewire.BOARD_MAX and bad == 0 and len(entries) == n
    assert nodewire.board_text(1.0, {"n0": big}) == f'{{"at": 1.0, "nodes": {{"n0": {big}}}}}'


def test_a_snapshot_costs_well_under_the_sentinels_budget(
    procs: list[subprocess.Popen[str]],
) -> None:
    kids = [start(procs, LISTEN) for _ in range(8)]
    for k in kids:
        assert k.stdout is not None and k.stdout.readline()
    b = nodesnap.Builder()
    f = facts_of(*(k.pid for k in kids))
    costs = []
    for i in range(40):
        b.build(f, float(i))  # the ports every other one, as every PORTS_EVERY seconds
        costs.append(b.last_cost_ms)
    mean = sum(costs[1:]) / len(costs[1:])
    print(f"\nMEASURED snapshot of 8 processes: {mean:.3f} ms CPU a build (first {costs[0]:.2f})")
    assert mean < 2.0, costs
    for k in kids:
        os.kill(k.pid, signal.SIGKILL)
