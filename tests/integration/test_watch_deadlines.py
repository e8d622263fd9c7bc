"""The watchdog on real sshd nodes decides when a deadline runs out, not at the next tick,
and only on evidence asked for after that deadline."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from fakecluster import FakeCluster, cmdline, process_tree, tagged, wait_for
from helpers import Cfg, free_port, listener_job

from mntui.sessions.config import load_config
from mntui.sessions.events import Event, Phase
from mntui.sessions.poll import NodeSnapshot, NodeState, Verdict
from mntui.sessions.runs import latest
from mntui.sessions.ssh import Cluster
from mntui.sessions.watch import Watchdog, WatchEnd, WatchOutcome


class Rounds:
    """What each round told the watchdog about node1, and when its teardown began."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float, NodeState]] = []  # (asked, judged, state)
        self.killing: float | None = None
        self.dog: Watchdog | None = None

    def on_snapshots(self, snaps: dict[str, NodeSnapshot], verdicts: dict[str, Verdict]) -> None:
        assert self.dog is not None
        asked = self.dog.poller.asked()["node1"]
        self.seen.append((asked, time.monotonic(), verdicts["node1"].state))

    def on_event(self, e: Event) -> None:
        if e.phase is Phase.KILLING and e.message.startswith("watchdog:") and not self.killing:
            self.killing = time.monotonic()

    def first(self, state: NodeState) -> tuple[float, float, NodeState]:
        return next(r for r in self.seen if r[2] is state)


def watchdog(cfg: Cfg, job: str, watch: str) -> tuple[Path, Rounds, Watchdog, Cluster]:
    path = cfg.write(listener_job(job, free_port(), extra=f"watch: {{{watch}}}"))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0  # no watchdog of its own
    config, record = load_config(path), latest(job)
    assert record is not None
    rounds = Rounds()
    cluster = Cluster(config.nodes, config.ssh)
    dog = Watchdog(config, record, cluster, rounds.on_event, rounds.on_snapshots)
    rounds.dog = dog
    return path, rounds, dog, cluster


def test_a_freeze_is_decided_when_frozen_after_runs_out(fake: FakeCluster, cfg: Cfg) -> None:
    """With a 4 s interval, a tick-bound judge decided ~3 s after frozen_after ran out."""
    job = "dlfrozen"
    path, rounds, dog, cluster = watchdog(
        cfg, job, "frozen_after: 1, interval: 4, capture_budget: 0"
    )
    with cluster:
        wait_for(lambda: "serving" in fake.node("node1").log(job), 20, what="node1 up")
        # The job's python, not the pane's process: tmux continues a pane process that stops.
        (worker,) = [p for p in tagged(job, "node1") if cmdline(p).startswith("python3 -c")]
        os.kill(worker, signal.SIGSTOP)
        limit = time.monotonic() + 30
        end = dog.run(stop=lambda: time.monotonic() > limit)
    assert end.outcome is WatchOutcome.TORN_DOWN and end.trigger is not None, rounds.seen
    assert end.trigger.state is NodeState.FROZEN, end
    _, start, _ = rounds.first(NodeState.FROZEN)  # the freeze counts from this round's end
    asked, _, state = rounds.seen[-1]
    assert state is NodeState.FROZEN
    assert asked >= start + 1.0, rounds.seen  # the deciding poll was asked after the deadline
    assert rounds.killing is not None and rounds.killing - start < 2.5, (rounds.killing, start)
    assert len(rounds.seen) <= 3, rounds.seen  # no polls but the tick's and the deadline's
    wait_for(lambda: not tagged(job), 15, what="nothing left running")
    assert cfg.mntui(path, "kill").returncode == 0


def test_an_unreachable_node_is_decided_at_its_deadline_mid_round(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """node1's sshd stops: the round that sees it silent waits `round_wait` (4 s here), the
    next only until `unreachable_after` (1 s) has passed; it used to wait 4 s again."""
    job = "dlgone"
    path, rounds, dog, cluster = watchdog(cfg, job, "unreachable_after: 1, capture_budget: 0")
    dog.poller.round_wait = 4.0
    ended: list[WatchEnd] = []
    sshd: list[int] = []
    with cluster:
        runner = threading.Thread(target=lambda: ended.append(dog.run()), daemon=True)
        runner.start()
        try:
            wait_for(lambda: rounds.seen, 20, what="a first round")
            sshd += process_tree(fake.node("node1").proc.pid)  # type: ignore[union-attr]  # + ours
            for pid in sshd:
                os.kill(pid, signal.SIGSTOP)
            wait_for(lambda: rounds.killing, 30, what="the teardown")
            assert rounds.killing is not None
            _, start, _ = rounds.first(NodeState.UNREACHABLE)
            assert 1.0 <= rounds.killing - start < 2.5, (rounds.killing, start, rounds.seen)
            wait_for(lambda: not tagged(job, "node0"), 15, what="node0's job down")
        finally:
            for pid in sshd:
                os.kill(pid, signal.SIGCONT)
        runner.join(60)  # the teardown's kill on node1 goes on once its sshd runs again
    assert ended and ended[0].outcome is WatchOutcome.TORN_DOWN, ended
    assert cfg.mntui(path, "kill").returncode == 0
    assert not tagged(job)
