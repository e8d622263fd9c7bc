"""Losing the main of a run the cluster watches (issue 37): a spare succeeds it on the
cluster, with this machine cut off; a main that comes back never acts beside it; a
partition that leaves a worker hearing the main starts nothing.

The successor is the spare the placement rule would put at rank 0; it leads the next
epoch only once it and every worker of the attempt lost the main (node/chain/succession.py).
The first test runs on the suite's shared fake nodes (127.0.0.1); the other two need
nodes that are hosts of their own (network namespaces: tests/netns.py, root only): a
main stopped on 127.0.0.1 would hold every node's watch port, and no one node's link
could be cut alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import netns
import pytest
from clusterwatch import SPARE_JOB, cut_off, runs_on, watchers
from fakecluster import FakeCluster, alive, free_port, process_tree, wait_for
from helpers import Cfg

from mntui.sessions.launch.tmux import session_name

REACHED = ("node1", "node2")


def _lose_main(fake: FakeCluster) -> list[int]:
    """node0 as a dead host: its sshd stopped (no answer), everything it ran killed."""
    node = fake.node("node0")
    assert node.proc is not None
    held = process_tree(node.proc.pid)
    for pid in held:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    node.kill_all(keep=held)  # all at once: no watcher starts its partner again
    return held


def _cont(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _freeze_host(fake: FakeCluster, node: str) -> list[int]:
    """Everything of `node` stopped at once, as a host whose VM is suspended; resumed by
    _cont, in one go too."""
    stopped: list[int] = []
    for _ in range(3):  # a fork under way at a stop shows its child a sweep later
        new = [p for p in alive(fake.node(node).pids()) if p not in stopped]
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped += new
    return stopped


def _log(fake: FakeCluster, job: str, node: str, name: str) -> str:
    """A watcher's log in `node`'s chain dir (sentinel.log, coord.log), or ""."""
    for d in fake.node(node).run_dirs(job):
        path = d / name
        if path.exists():
            return path.read_text(errors="replace")
    return ""


def _chain_dir(fake: FakeCluster, job: str, node: str, chain: str) -> Path:
    return fake.node(node).home / ".mntui" / "runs" / job / chain / node


class TwoAttempts:
    """Samples every node's ranks while a test runs: no node may ever run two attempts'
    ranks at once, and `later` (a node set), once the successor's attempt runs there,
    never runs the old one again."""

    def __init__(self, job: str, nodes: tuple[str, ...]) -> None:
        self.job, self.nodes = job, nodes
        self.seen: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            for n in self.nodes:
                runs = runs_on(self.job, n)
                if len(runs) > 1:
                    self.seen.append(f"{n} runs {sorted(runs)}")

    def __enter__(self) -> TwoAttempts:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def test_a_lost_main_is_succeeded_by_the_spare_with_this_machine_cut_off(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """2 nodes + 1 spare, `restart: {max: 2}`: node0 (the main) dies as a host does while
    this machine reaches no node. node1's sentinel tears its rank down and gives its
    word to node2; node2 leads epoch 1 and starts attempt 2 there (rank 0) and on node1,
    with nothing of this machine's. Once this machine is back, `status` reads node2's
    board (node1's epoch.json says where it is) and `mntui kill` stops everything on
    every node it reaches. Before issue 37 only a `mntui watch` here could do this."""
    job = "cw-successor"
    port, wport = free_port(), free_port()
    path = cfg.write(SPARE_JOB.format(job=job, port=port, wport=wport))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "spare node2: its sentinel is up" in res.stdout, res.stdout
    wait_for(lambda: runs_on(job, "node0") and runs_on(job, "node1"), 30, what="both ranks")
    first = next(iter(runs_on(job, "node0")))
    held: list[int] = []
    with TwoAttempts(job, REACHED) as two, cut_off(fake, REACHED):  # nothing of ours acts
        held = _lose_main(fake)
        t0 = time.monotonic()
        try:
            wait_for(lambda: runs_on(job, "node2"), 60, what="attempt 2 on node2, the new main")
        finally:
            print(_log(fake, job, "node2", "coord.log"))
        took = time.monotonic() - t0
        new = next(iter(runs_on(job, "node2")))
        wait_for(lambda: new in runs_on(job, "node1"), 30, what="attempt 2 on node1 too")
        both = time.monotonic() - t0
        assert new != first and first not in runs_on(job, "node1"), runs_on(job, "node1")
        assert watchers(job, "coord", "node2"), "node2's coordinator"
    try:
        assert not two.seen, two.seen
        word = json.loads((_chain_dir(fake, job, "node1", first) / "lost.json").read_text())
        assert word["epoch"] == 0 and word["run"] == first, word
        epoch = json.loads((_chain_dir(fake, job, "node1", first) / "epoch.json").read_text())
        assert (epoch["epoch"], epoch["main"]) == (1, "node2"), epoch
        data = json.loads(cfg.mntui(path, "status", "--json").stdout)
        assert data["run_id"] == new and data["attempt"] == 1 and data["chain"] == first, data
        assert [(n["node"], n["rank"]) for n in data["nodes"]] == [("node2", 0), ("node1", 1)]
        status = cfg.mntui(path, "status").stdout
        assert "coordinator on node2" in status, status
        assert "the main node0 was lost" in status, status
        assert "node0 is lost: replaced by spare node2 (rank 0)" in status, status
        res = cfg.mntui(path, "kill")
        assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: node0 cannot be reached
        assert "Traceback" not in res.stderr, res.stderr  # the lost main is one line
        assert "asked the coordinator on node2" in res.stdout + res.stderr, res.stdout
        wait_for(lambda: not any(runs_on(job, n) for n in REACHED), 20, what="nothing on node1/2")
        wait_for(
            lambda: not watchers(job, "(sentinel|coord|guard)", "node[12]"),
            20,
            what="watchers gone",
        )
        left = [s for n in REACHED if (s := session_name(job, n)) in fake.node(n).sessions()]
        assert not left, f"tmux sessions of the job left: {left}"
        print(f"main lost -> attempt 2 running on node2 in {took:.1f} s, on node1 in {both:.1f} s")
    finally:
        _cont(held)


def test_a_worker_with_nothing_left_still_gives_its_word(fake: FakeCluster, cfg: Cfg) -> None:
    """node1's rank exited 0 before node0 (the main) died as a host does: node1's
    sentinel has nothing to kill, yet says it lost the main (lost.json, nothing left),
    gives its word, and node2 starts attempt 2 on node2 + node1."""
    job = "cw-succ-early"
    early = SPARE_JOB.replace("r = int(sys.argv[1]);", "r = int(sys.argv[1]); r and sys.exit(0);")
    path = cfg.write(early.format(job=job, port=free_port(), wport=free_port()))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: runs_on(job, "node0"), 30, what="rank 0")
    first = next(iter(runs_on(job, "node0")))
    code = _chain_dir(fake, job, "node1", first) / "exit_code"
    wait_for(lambda: code.exists() and code.read_text().strip() == "0", 30, what="rank 1 done")
    held = _lose_main(fake)
    try:
        word = _chain_dir(fake, job, "node1", first) / "lost.json"
        wait_for(word.exists, 30, what="node1's lost.json")
        lost = json.loads(word.read_text())
        assert lost.get("nothing_left") is True, lost
        wait_for(lambda: runs_on(job, "node2"), 45, what="attempt 2 on node2, the new main")
    finally:
        _cont(held)
        cfg.mntui(path, "kill")


# -- nodes that are hosts of their own --------------------------------------------------

NET = pytest.mark.skipif(not netns.available(), reason="network namespaces need root")


@pytest.fixture(scope="module")
def netfake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    cluster = FakeCluster(tmp_path_factory.mktemp("netfake"), 4, netns=True).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def ncfg(netfake: FakeCluster, tmp_path: Path) -> Iterator[Cfg]:
    yield Cfg(netfake, tmp_path)
    netfake.stop_jobs()


@NET
def test_a_main_that_comes_back_stands_down_and_never_runs_beside_its_successor(
    netfake: FakeCluster, ncfg: Cfg
) -> None:
    """node0 (the main) is frozen whole, as a suspended VM, past unreachable_after:
    node2 succeeds it. Then node0 wakes: its coordinator finds its worker gone, stands
    down (its stale rank 0 killed, its chain ended, nothing restarted) and no node ever
    runs two attempts at once; `status` names node2's coordinator, and `kill` leaves
    nothing on any node, node0 included."""
    job = "cw-succ-wake"
    path = ncfg.write(SPARE_JOB.format(job=job, port=free_port(), wport=free_port()))
    res = ncfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: runs_on(job, "node0") and runs_on(job, "node1"), 30, what="both ranks")
    first = next(iter(runs_on(job, "node0")))
    nodes = ("node0", "node1", "node2")
    with TwoAttempts(job, nodes) as two:
        frozen = _freeze_host(netfake, "node0")
        try:
            t0 = time.monotonic()
            wait_for(lambda: runs_on(job, "node2"), 60, what="attempt 2 on node2")
            new = next(iter(runs_on(job, "node2")))
            wait_for(lambda: new in runs_on(job, "node1"), 30, what="attempt 2 on node1")
            took = time.monotonic() - t0
        finally:
            _cont(frozen)
        t1 = time.monotonic()
        wait_for(lambda: not runs_on(job, "node0"), 30, what="node0's stale rank gone")
        wait_for(lambda: not watchers(job, "coord", "node0"), 30, what="node0's coordinator gone")
        down = time.monotonic() - t1
        time.sleep(0.1)  # one more sample of every node by TwoAttempts after the stand-down
    assert not two.seen, two.seen
    assert runs_on(job, "node1") and new in runs_on(job, "node1"), "the successor's attempt runs"
    said = _log(netfake, job, "node0", "coord.log")
    assert "stands down" in said, said
    old = json.loads(
        (_chain_dir(netfake, job, "node0", first) / "coord" / "chain.json").read_text()
    )
    assert old.get("main_here") is True and old["status"] != "running", old
    assert len(old["attempts"]) == 1, "the old coordinator started no attempt after it woke"
    data = json.loads(ncfg.mntui(path, "status", "--json").stdout)
    assert data["run_id"] == new and data["nodes"][0]["node"] == "node2", data
    assert "coordinator on node2" in str(data.get("watchdog")), data
    res = ncfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: not any(runs_on(job, n) for n in nodes), 20, what="nothing left")
    wait_for(lambda: not watchers(job, "(sentinel|coord|guard)"), 20, what="no watcher left")
    print(f"main frozen -> attempt 2 on node2+node1 in {took:.1f} s; woken main stood down "
          f"in {down:.1f} s")  # fmt: skip


@NET
def test_a_partition_that_leaves_a_worker_hearing_the_main_starts_no_successor(
    netfake: FakeCluster, ncfg: Cfg
) -> None:
    """3 nodes + a spare; node1 and the spare node3 are cut from node0 (the main) alone,
    node2 still hears it. node1 and node3 lose the main, and node1 gives its word to
    node3, but node2 never does: node3 starts nothing, says what it waits for, and
    leaves once its patience is spent; the main's coordinator tears its attempt down
    (node1 unreachable to it) and cannot start another without node1."""
    job = "cw-succ-split"
    body = SPARE_JOB.replace("nodes: [node0, node1]", "nodes: [node0, node1, node2]").replace(
        "spares: [node2]", "spares: [node3]"
    )
    path = ncfg.write(body.format(job=job, port=free_port(), wport=free_port()))
    res = ncfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: all(runs_on(job, n) for n in ("node0", "node1", "node2")), 30, what="ranks")
    first = next(iter(runs_on(job, "node0")))
    net = netfake.net
    assert net is not None
    net.cut("node0", "node1")
    net.cut("node0", "node3")
    try:
        coord = _chain_dir(netfake, job, "node3", first) / "coord.log"
        wait_for(lambda: "waiting for node2" in (coord.read_text() if coord.exists() else ""),
                 40, what="node3 waiting for node2's word")  # fmt: skip
        lost = json.loads((_chain_dir(netfake, job, "node1", first) / "lost.json").read_text())
        assert lost["epoch"] == 0, lost
        chain = _chain_dir(netfake, job, "node0", first) / "coord" / "chain.json"
        wait_for(lambda: json.loads(chain.read_text())["status"] not in ("running", "backoff",
                 "starting"), 90, what="the main's chain over")  # fmt: skip
        assert not runs_on(job, "node3"), "the spare started nothing"
        assert not (_chain_dir(netfake, job, "node1", first) / "epoch.json").exists()
        said = json.loads(chain.read_text())
        assert len(said["attempts"]) <= 2 and said["status"] == "failed-restart", said
        assert (
            not runs_on(job, "node3")
            and not (_chain_dir(netfake, job, "node3", first) / "epoch.json").exists()
        ), "node3 never led"
    finally:
        net.heal("node0", "node1")
        net.heal("node0", "node3")
        ncfg.mntui(path, "kill")
