"""The cluster's watch under faults of its own parts (issue 30): a node's tmux server
gone, a worker's sentinel killed, the coordinator hung (a dead one is started again:
test_cluster_respawn.py), the main node's job side frozen, and the job ending by
itself. Each ends with nothing of the job left.

Real parts, as tests/integration/test_cluster_watch.py: sshd fake nodes, tmux, a 2-node
torchrun job (gloo, CPU), the sentinel bundle shipped over SSH. On a failure the test
prints every node's sentinel.log, coord.log, lost.json and the coordinator's board.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from clusterwatch import launched, nothing_left, run_dir, watchers
from fakecluster import (
    FakeCluster,
    alive,
    cmdline,
    free_port,
    pids_with_env,
    tagged,
    wait_for,
)
from helpers import Cfg, listener_job, steps_job, tagged_anywhere, torch_job

from mntui.sessions.launch.tmux import session_name

pytestmark = pytest.mark.integration

NODES = ("node0", "node1")
# unreachable_after (3) less the heartbeat (1 s: the last word may come up to one
# before the fault) less some slack: the soonest a sentinel may call its coordinator lost
UNREACHABLE_AFTER = 3
EARLIEST_LOSS = UNREACHABLE_AFTER - 1.5
WATCH = "watch: {{where: cluster, port: {port}, unreachable_after: 3, frozen_after: 2}}"


def cluster_job(cfg: Cfg, job: str, torch: bool = False, steps: int = 0) -> tuple[Path, int, int]:
    """Real torchrun where the job's own reaction matters (`torch`), else the light
    job of plain python3 steps (the watch is what is under test; torch costs CPU)."""
    port, wport = free_port(), free_port()
    if torch:
        body = torch_job(job, cfg.workdir_with_train(), port, extra=WATCH.format(port=wport))
    else:
        body = steps_job(job, port, extra=WATCH.format(port=wport), steps=steps)
    return cfg.write(body), port, wport


def job_side(job: str, node: str) -> list[int]:
    """Everything of the run on `node`: its ranks, launcher, pane shell and watchers."""
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{node}(/[^/]+)?"))


def ranks_down(job: str, node: str | None = None) -> bool:
    """No job process (watchers aside) of the run on `node` (default: any node)."""
    return not tagged(job, node)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def decision(fake: FakeCluster, job: str) -> dict[str, Any] | None:
    """The coordinator's decision.json on the main, once complete (a teardown's
    `ended_at` is written after the kills)."""
    d = read_json(run_dir(fake, job, "node0") / "coord" / "decision.json")
    return d if d is not None and "ended_at" in d else None


def lost(fake: FakeCluster, job: str, node: str) -> dict[str, Any] | None:
    return read_json(run_dir(fake, job, node) / "lost.json")


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(none)"


@contextmanager
def told_on_failure(fake: FakeCluster, job: str) -> Iterator[None]:
    """On a failure, what the watch's parts wrote on the nodes, for the report."""
    try:
        yield
    except BaseException:
        for n in NODES:
            dirs = fake.node(n).run_dirs(job)
            if not dirs:
                print(f"== {n}: no run dir")
                continue
            d = dirs[-1]
            for name in ("sentinel.log", "coord.log", "lost.json", "exit_code"):
                if (d / name).exists():
                    print(f"== {n} {name}:\n{tail(d / name)}")
            for name in ("decision.json", "status.json", "journal.jsonl"):
                if (d / "coord" / name).exists():
                    print(f"== {n} coord/{name}:\n{tail(d / 'coord' / name, 30)}")
            print(f"== {n} output.log:\n{tail(d / 'output.log', 15)}")
        print(f"== left: {[(p, cmdline(p)[:100]) for p in tagged_anywhere(job)]}")
        raise


def sentinel_log(fake: FakeCluster, job: str, node: str) -> str:
    try:
        return (run_dir(fake, job, node) / "sentinel.log").read_text(errors="replace")
    except OSError:
        return ""


def test_a_workers_tmux_server_killed_the_sentinel_lives_and_the_job_comes_down(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The sentinel runs in a session of its own, outside the tmux server's tree: it
    outlives `tmux kill-server` and reports its node's ranks gone. Which way the job
    then comes down is a race: torchrun still alive under a dead pane shell is node1
    `orphaned` (the coordinator tears down); torchrun gone first, gloo fails node0's
    rank at once and the coordinator sees the job end (node0 failed, node1 not-running).
    Either way the coordinator's word is on the main and the sentinels obeyed its stop.
    (A main that does not notice is the next test.)"""
    job = "cf-tmux"
    path, port, wport = cluster_job(cfg, job, torch=True)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        sentinel = watchers(job, "sentinel", "node1")
        assert len(sentinel) == 1, sentinel
        t0 = time.monotonic()
        assert fake.node("node1").tmux("kill-server").returncode == 0
        wait_for(lambda: ranks_down(job), 60, what="the job down on both nodes")
        down = time.monotonic() - t0
        d = wait_for(lambda: decision(fake, job), 30, what="the coordinator's decision.json")
        decided = time.monotonic() - t0
        print(f"tmux kill-server on node1 -> job down on both {down:.2f}s, "
              f"decision.json {decided:.2f}s: {d}")  # fmt: skip
        assert isinstance(d, dict)
        if "ended" in d:  # gloo took node0 down before node1 was seen orphaned
            assert d["ended"] == {"node0": "failed", "node1": "not-running"}, d
        else:
            assert (d.get("decided_by"), d.get("node")) == ("coordinator", "node1"), d
            assert "error" not in d["kill"]["node1"], f"node1's sentinel reported: {d}"
        wait_for(lambda: not watchers(job, "sentinel") and not watchers(job, "coord"), 20,
                 what="the sentinels and the coordinator exiting")  # fmt: skip
        assert "exits: stopped by the coordinator" in sentinel_log(fake, job, "node1"), (
            "node1's sentinel must outlive its tmux server and leave on the coordinator's stop"
        )
        nothing_left(fake, job, (port, wport))


def test_a_workers_tmux_server_killed_under_a_main_that_does_not_notice(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """node1's part gone (no session, no process, no exit code) while the main runs on,
    as a rank blocked in a collective that never notices its peer died (NCCL can wait
    30 min): the coordinator must tear the job down naming node1, not wait for a stall.
    The main here only listens on the master port, so nothing but the watch ends it."""
    job = "cf-tmuxquiet"
    port, wport = free_port(), free_port()
    path = cfg.write(listener_job(job, port, extra=WATCH.format(port=wport)))
    with told_on_failure(fake, job):
        res = cfg.mntui(path, "launch", "--no-ui", watch=True)
        assert res.returncode == 0, res.stdout + res.stderr
        wait_for(lambda: all("serving" in fake.node(n).log(job) for n in NODES), 30,
                 what="both nodes up")  # fmt: skip
        board = run_dir(fake, job, "node0") / "coord" / "status.json"
        wait_for(  # seen running first: a node never seen is another case than one that vanished
            lambda: (
                ((read_json(board) or {}).get("nodes") or {}).get("node1", {}).get("state")
                == "running"
            ),
            30,
            what="the coordinator seeing node1 run",
        )
        t0 = time.monotonic()
        assert fake.node("node1").tmux("kill-server").returncode == 0
        wait_for(lambda: ranks_down(job, "node1"), 20, what="node1's part dying with tmux")
        try:
            d = wait_for(lambda: decision(fake, job), 20, what="the coordinator's decision")
        except TimeoutError:
            d = None
        print(f"tmux kill-server on node1, main running on -> decision after "
              f"{time.monotonic() - t0:.2f}s: {d}")  # fmt: skip
        try:
            assert isinstance(d, dict) and (d.get("decided_by"), d.get("node")) == (
                "coordinator",
                "node1",
            ), (
                "node1 not-running (its session and processes vanished, no exit code) while "
                "node0 runs is never a decision: the judge acts on failed/orphaned/frozen/"
                "unreachable/stalled only, so the main's ranks would wait for stall_after"
            )
            # the decision is on the main before node1's sentinel has heard and said so
            wait_for(
                lambda: "exits: stopped by the coordinator" in sentinel_log(fake, job, "node1"),
                20,
                what="node1's sentinel stopped by the coordinator",
            )
        finally:
            assert cfg.mntui(path, "kill").returncode == 0
            nothing_left(fake, job, (port, wport))


def test_a_workers_watch_killed_the_coordinator_tears_down_on_its_silence(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """A node's watch gone (its sentinel and the guard that would start it again) is a
    node the coordinator cannot see: unreachable after `unreachable_after`, the job is
    torn down, and the decision says node1's ranks could not be killed from the
    cluster; `mntui kill` leaves nothing. (The sentinel alone killed is started again:
    test_cluster_respawn.py.)"""
    job = "cf-sentkill"
    path, port, wport = cluster_job(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        both = watchers(job, "sentinel", "node1") + watchers(job, "guard", "node1")
        assert len(both) == 2, both
        for pid in both:  # stopped first: neither can start the other again meanwhile
            os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        for pid in both:
            os.kill(pid, signal.SIGKILL)
        d = wait_for(lambda: decision(fake, job), 40, what="the coordinator's decision.json")
        decided = time.monotonic() - t0
        wait_for(lambda: ranks_down(job, "node0"), 30, what="the main's ranks torn down")
        main_down = time.monotonic() - t0
        print(f"node1's sentinel SIGKILL -> decision {decided:.2f}s, main's ranks down "
              f"{main_down:.2f}s (unreachable_after {UNREACHABLE_AFTER} s): {d}")  # fmt: skip
        assert isinstance(d, dict)
        assert (d.get("node"), d.get("state")) == ("node1", "unreachable"), d
        assert "error" in d["kill"]["node1"] and "may still run" in d["kill"]["node1"]["error"]
        assert "error" not in d["kill"]["node0"], d["kill"]["node0"]
        assert decided >= UNREACHABLE_AFTER, "node1 was torn down before unreachable_after"
        wait_for(lambda: not watchers(job, "coord") and not watchers(job, "sentinel"), 20,
                 what="the coordinator and the main's sentinel exiting")  # fmt: skip
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
        nothing_left(fake, job, (port, wport))


def test_the_coordinator_hung_every_sentinel_takes_its_stacks_and_tears_its_node_down(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """A coordinator that dies is started again by the main's sentinel
    (test_cluster_respawn.py); one that hangs (here SIGSTOPped) lives and says nothing,
    and a job without its main's watch is a job without its main: each sentinel, after
    `unreachable_after` without a word, takes its ranks' stacks (they wait in a
    collective with the main's), kills them, says why in lost.json and exits; `mntui
    report` shows the stacks."""
    job = "cf-coordhang"
    path, port, wport = cluster_job(cfg, job, torch=True)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        coord = watchers(job, "coord")
        assert len(coord) == 1, coord
        t0, wall0 = time.monotonic(), time.time()
        os.kill(coord[0], signal.SIGSTOP)
        try:
            wait_for(lambda: ranks_down(job), 40, what="both nodes' ranks torn down")
            down = time.monotonic() - t0
            wait_for(lambda: not watchers(job, "sentinel"), 20, what="the sentinels exiting")
        finally:
            os.kill(coord[0], signal.SIGCONT)
        gone = {n: lost(fake, job, n) for n in NODES}
        saved = {n: read_json(run_dir(fake, job, n) / "stacks.json") for n in NODES}
        print(f"coordinator SIGSTOP -> job down {down:.2f}s (unreachable_after "
              f"{UNREACHABLE_AFTER} s); lost.json: {gone}; stacks: "
              f"{ {n: (s or {}).get('seconds') for n, s in saved.items()} }")  # fmt: skip
        for n in NODES:
            info = gone[n]
            assert info is not None, (
                f"{n}'s sentinel lost the coordinator and exited without lost.json; its log:\n"
                + sentinel_log(fake, job, n)
            )
            assert "no word from the coordinator" in info["why"], info
            assert info["lost_at"] - wall0 >= EARLIEST_LOSS, (
                f"{n} gave up before unreachable_after: {info}"
            )
            assert "kill" not in info, "the kill's report is apart: lost.json stays small"
            killed = read_json(run_dir(fake, job, n) / "lost-kill.json")
            assert killed is not None and killed["kill"]["stacks"]["stacks"] >= 1, killed
            got = saved[n]
            assert got is not None and got["error"] is None, got
            assert (got["decision"]["node"], got["decision"]["state"]) == ("node0", "unreachable")
        res = cfg.mntui(path, "report", "--json", timeout=180)
        report: dict[str, Any] = json.loads(res.stdout)
        stacks = {x["node"]: x["stacks"] for x in report["nodes"]}
        print(f"report: {report['headline']}")
        # each node took its ranks' stacks; both tear down at once, so a rank may already
        # be exiting on its peer's reset when py-spy reads it ("empty stack"): one has frames
        assert all(stacks[n] and stacks[n][0]["pid"] for n in NODES), report
        assert any(s[0]["frames"] for s in stacks.values()), report
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
        nothing_left(fake, job, (port, wport))


def test_the_main_frozen_the_worker_tears_its_ranks_down_and_the_main_ends_after(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The main's whole job side stopped (its coordinator, sentinel and ranks; not its
    sshd): the worker's sentinel hears nothing, tears node1's ranks down after
    `unreachable_after` and says so. Let go, the main's parts end too."""
    job = "cf-mainstop"
    path, port, wport = cluster_job(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        stopped: list[int] = []
        try:
            for pid in job_side(job, "node0"):
                try:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
            t0 = time.monotonic()
            info = wait_for(lambda: lost(fake, job, "node1"), 40, what="node1's lost.json")
            wait_for(lambda: ranks_down(job, "node1"), 20, what="node1's ranks torn down")
            down = time.monotonic() - t0
            print(f"main SIGSTOPped -> node1's ranks down {down:.2f}s: {info}")
            assert isinstance(info, dict) and "no word from the coordinator" in info["why"]
            assert down >= EARLIEST_LOSS, "node1 gave up on the main before unreachable_after"
            wait_for(lambda: not watchers(job, "sentinel", "node1"), 20,
                     what="node1's sentinel exiting")  # fmt: skip
        finally:
            t1 = time.monotonic()
            for pid in stopped:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        try:
            wait_for(lambda: not job_side(job, "node0"), 45, what="the main's parts ending")
            print(
                f"SIGCONT -> the main's parts ended by themselves in {time.monotonic() - t1:.2f}s"
            )
            by_itself = True
        except TimeoutError:
            left = [(p, cmdline(p)[:80]) for p in job_side(job, "node0")]
            print(f"the main's parts did not end by themselves: {left}")
            by_itself = False
        print(f"the main's decision.json: {decision(fake, job)}; lost.json: "
              f"{lost(fake, job, 'node0')}")  # fmt: skip
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
        nothing_left(fake, job, (port, wport))
        assert by_itself, "let go, the main's coordinator, sentinel or ranks never ended"


def test_a_job_that_ends_by_itself_stops_the_watch_and_is_finished(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """Both nodes exit 0: the coordinator says the job ended, stops the sentinels and
    exits; `status` then reads that and marks the run finished."""
    job = "cf-ends"
    # 6 s of steps: a main that ended before the launch saw its port fails the launch,
    # and starting the main's tmux session, coordinator and sentinel took up to 3.1 s
    # on a loaded machine (25 steps, 2.5 s, failed 2 launches of 7 so)
    path, port, wport = cluster_job(cfg, job, steps=60)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        t0 = time.monotonic()
        d = wait_for(
            lambda: read_json(run_dir(fake, job, "node0") / "coord" / "decision.json"),
            60,
            what="the coordinator's decision.json",
        )
        print(f"decision {time.monotonic() - t0:.2f}s after both nodes trained: {d}")
        assert isinstance(d, dict) and d.get("ended") == dict.fromkeys(NODES, "finished"), d
        wait_for(lambda: not watchers(job, "sentinel") and not watchers(job, "coord"), 20,
                 what="the sentinels and the coordinator exiting")  # fmt: skip
        for n in NODES:
            assert "done after 60 steps" in fake.node(n).log(job)
            assert "exits: stopped by the coordinator" in sentinel_log(fake, job, n)
            assert lost(fake, job, n) is None
        dead_panes = [s for n in NODES if (s := session_name(job, n)) in fake.node(n).sessions()]
        res = cfg.mntui(path, "status")
        assert "the coordinator saw the job end" in res.stdout, res.stdout
        assert re.search(r"\bfinished\b", res.stdout), res.stdout
        assert not dead_panes, (
            f"the coordinator saw the job end and the watch exited, leaving the sessions "
            f"{dead_panes} with dead panes on the nodes; the manager's watchdog closes them "
            "when a job ends by itself (watchdog.finish -> close_sessions)"
        )
        nothing_left(fake, job, (port, wport))
