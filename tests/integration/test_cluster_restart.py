"""Restarts on the cluster (issue 30, done-when 3): with this machine cut off from
every node (a laptop asleep: nothing of ours runs here, and SSH to the nodes hangs), a
rank that dies is restarted by the coordinator, main first then the workers, from the
scripts the launch left; once this machine looks again, `status` and `history` show
both attempts, and a crash loop gives up after `restart.max`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal

from clusterwatch import SPARE_JOB, runs_on, watchers
from fakecluster import (
    FakeCluster,
    alive,
    cmdline,
    environ_of,
    free_port,
    pids_with_env,
    port_listening,
    wait_for,
)
from helpers import Cfg, step_count, tagged_anywhere
from test_cluster_watch import cluster_job, cut_off, launched, nothing_left

from mntui.sessions.launch.tmux import session_name

# max 1: the crash loop gives up at attempt 1's failure. With max 2 it relaunched a real
# torchrun once more (~12 s) to prove what the spare tests below already do on the
# cluster (a restart from attempt 1) and the policy's unit tests count (in a row).
RESTART = "restart: {max: 1, backoff: 1}"


def ranks_of(job: str, node: str) -> dict[str, list[int]]:
    """The run id of each attempt with live ranks on `node`, and their PIDs."""
    out: dict[str, list[int]] = {}
    for pid in alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{re.escape(node)}")):
        if "train.py" in cmdline(pid) and "torch.distributed.run" not in cmdline(pid):
            tag = next(e for e in environ_of(pid) if e.startswith(b"MNTUI_RUN=")).decode()
            out.setdefault(tag.split("/")[1], []).append(pid)
    return out


def test_a_rank_dies_while_this_machine_sleeps_and_the_coordinator_restarts_the_job(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-restart"
    path, port, wport = cluster_job(cfg, job, RESTART)
    launched(cfg, path, job, fake)
    first = next(iter(ranks_of(job, "node1")))
    with cut_off(fake):
        os.kill(ranks_of(job, "node1")[first][0], signal.SIGKILL)
        wait_for(  # attempt 1 trains on both nodes before this machine wakes
            lambda: all(set(ranks_of(job, n)) - {first} for n in ("node0", "node1")),
            90,
            what="attempt 1 running on both nodes, started by the coordinator",
        )
        second = next(iter(set(ranks_of(job, "node1")) - {first}))
        assert not ranks_of(job, "node1").get(first), "attempt 0 is gone"
        wait_for(
            lambda: step_count(fake.node("node1").log(job)) >= 3, 60, what="attempt 1 training"
        )
    res = cfg.mntui(path, "status", "--json")
    data = json.loads(res.stdout)

    assert data["run_id"] == second and data["attempt"] == 1, data
    assert data["chain"] == first and data["via"] == "coordinator", data
    text = cfg.mntui(path, "status").stdout
    assert "attempt 2/2" in text and "(running)" in text, text
    hist = cfg.mntui(path, "history").stdout
    assert f"attempt 1 ({first})" in hist and "node1 failed" in hist, hist  # from 1
    # A crash loop: whichever attempt runs now dies too, until the policy gives up
    # (max 1: two attempts in all, whether or not one also ended by itself).
    killed = {first}
    for _ in range(2):
        wait_for(
            lambda: (set(ranks_of(job, "node1")) - killed) or not tagged_anywhere(job),
            90,
            what="the next attempt's rank on node1, or the end of the chain",
        )
        fresh = set(ranks_of(job, "node1")) - killed
        if not fresh:
            break
        run = fresh.pop()
        with contextlib.suppress(ProcessLookupError, IndexError, KeyError):
            os.kill(ranks_of(job, "node1")[run][0], signal.SIGKILL)
        killed.add(run)
    nothing_left(fake, job, (port, wport))
    text = cfg.mntui(path, "status").stdout
    assert "(gave-up)" in text and "gave up after 1 restart(s) in a row" in text, text
    hist = cfg.mntui(path, "history").stdout
    assert "gave-up after 2 attempt(s)" in hist, hist
    assert "training 0.0s" not in hist, hist  # the coordinator clocked the steps


ALL = ("node0", "node1", "node2")


def _fail_twice(job: str, culprit: str, other: str) -> str:
    """`culprit`'s rank dies in attempt 0 and, once attempt 1 runs on both, in attempt
    1: a repeat culprit (the nodes stay the same after one failure). Attempt 0's run
    id (the chain's)."""
    wait_for(lambda: runs_on(job, culprit), 30, what=f"{culprit}'s rank")
    first = next(iter(runs_on(job, culprit)))
    _kill_rank(job, culprit, first)
    wait_for(lambda: set(runs_on(job, culprit)) - {first}, 60, what=f"attempt 1 on {culprit}")
    second = next(iter(set(runs_on(job, culprit)) - {first}))
    wait_for(lambda: second in runs_on(job, other), 30, what=f"attempt 1 on {other}")
    assert not runs_on(job, "node2"), "one failure is no reason to swap"
    _kill_rank(job, culprit, second)
    return first


def _kill_rank(job: str, node: str, run: str) -> None:
    with contextlib.suppress(ProcessLookupError, IndexError, KeyError):
        os.kill(runs_on(job, node)[run][0], signal.SIGKILL)


def test_a_worker_that_dies_twice_is_replaced_by_the_spare_before_this_machine_wakes(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """2 nodes + 1 spare, `restart: {max: 2}`: node1's rank dies in attempt 0 (attempt 1
    on the same nodes), then in attempt 1 (node1 the repeat culprit): the coordinator
    starts attempt 2 on node0 + node2, node2 taking rank 1, while this machine is cut
    off. Then `status` shows the spare, and `mntui kill` leaves nothing on any node."""
    job = "cw-spare"
    port, wport = free_port(), free_port()
    path = cfg.write(SPARE_JOB.format(job=job, port=port, wport=wport))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "spare node2: its sentinel is up" in res.stdout, res.stdout
    wait_for(lambda: len(watchers(job, "sentinel")) == 3, 20, what="3 sentinels, the spare's too")
    assert watchers(job, "sentinel", "node2") and not runs_on(job, "node2")
    with cut_off(fake, ALL):
        first = _fail_twice(job, "node1", "node0")
        wait_for(lambda: runs_on(job, "node2"), 60, what="attempt 2 on the spare node2")
        third = next(iter(runs_on(job, "node2")))
        wait_for(lambda: third in runs_on(job, "node0"), 30, what="attempt 2 on node0")
        assert not runs_on(job, "node1"), "node1 broke twice in a row: it is out"
        wait_for(lambda: step_count(fake.node("node2").log(job)) >= 3, 30, what="node2 steps")
        assert "rank 1 NODE_RANK=1 on node2" in fake.node("node2").log(job)
    data = json.loads(cfg.mntui(path, "status", "--json").stdout)
    assert data["run_id"] == third and data["attempt"] == 2 and data["chain"] == first, data
    assert [(n["node"], n["rank"]) for n in data["nodes"]] == [("node0", 0), ("node2", 1)]
    text = cfg.mntui(path, "status").stdout
    assert "node1 broke twice in a row: replaced by spare node2 (rank 1)" in text, text
    chain = load_chain(fake, job)["attempts"]
    nodes = [e["nodes"] for e in chain]  # type: ignore[index]
    assert nodes == [["node0", "node1"]] * 2 + [["node0", "node2"]], nodes
    hist = cfg.mntui(path, "history").stdout
    assert "running after 3 attempt(s)" in hist and "attempt 1 (" in hist, hist
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: not tagged_anywhere(job), 20, what="every process of the job gone")
    left = [s for n in ALL if (s := session_name(job, n)) in fake.node(n).sessions()]
    assert not left, f"tmux sessions of the job left: {left}"
    for p in (port, wport):
        wait_for(lambda p=p: not port_listening(p), 10, what=f"port {p} free")


def test_a_node_past_quarantine_after_is_used_no_more_and_quarantined_here_too(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """`quarantine_after: {count: 1}`: node1's first failure quarantines it within the
    chain, so attempt 1 runs on the spare at once; this machine's next look writes the
    quarantine into its own list (by the coordinator's policy), where the next launch
    routes around it."""
    job = "cw-quar"
    port, wport = free_port(), free_port()
    text = SPARE_JOB.format(job=job, port=port, wport=wport).replace(
        "backoff: 1}", "backoff: 1, quarantine_after: {count: 1, within: 1h, for: 1h}}"
    )
    path = cfg.write(text)
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: runs_on(job, "node1"), 30, what="node1's rank")
    first = next(iter(runs_on(job, "node1")))
    with cut_off(fake, ALL):
        _kill_rank(job, "node1", first)
        wait_for(lambda: runs_on(job, "node2"), 60, what="attempt 1 on the spare node2")
        assert not runs_on(job, "node1")
    text = cfg.mntui(path, "status").stdout
    assert "node1 is quarantined: replaced by spare node2 (rank 1)" in text, text
    listed = cfg.mntui(path, "quarantine", "--list").stdout
    assert "node1" in listed and "coordinator on node0" in listed, listed
    assert "caused 1 failures within 1h" in listed, listed
    assert cfg.mntui(path, "kill").returncode == 0
    wait_for(lambda: not tagged_anywhere(job), 20, what="every process of the job gone")


def test_a_main_that_breaks_twice_hands_the_chain_to_the_spare(fake: FakeCluster, cfg: Cfg) -> None:
    """The coordinator runs on the main: a main that broke twice in a row is not replaced
    by its own coordinator, which ends its chain saying so and hands it to the spare
    (node/chain/succession.py); the spare succeeds it once every worker gave its word, and the
    next attempt runs on it at rank 0, while this machine is cut off. Before issue 37
    the chain ended there, for a stand-by on this machine to replace the main."""
    job = "cw-main"
    port, wport = free_port(), free_port()
    path = cfg.write(SPARE_JOB.format(job=job, port=port, wport=wport))
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    wait_for(lambda: len(watchers(job, "sentinel")) == 3, 20, what="3 sentinels")
    with cut_off(fake, ALL):
        _fail_twice(job, "node0", "node1")
        wait_for(lambda: runs_on(job, "node2"), 60, what="attempt 3 on node2, the new main")
        new = next(iter(runs_on(job, "node2")))
        wait_for(lambda: new in runs_on(job, "node1"), 30, what="attempt 3 on node1 too")
        wait_for(lambda: not watchers(job, "(sentinel|coord)", "node0"), 20, what="node0 left")
        assert not runs_on(job, "node0")
    chain = load_chain(fake, job)  # node0's, as it ended
    assert chain.get("main_here") is True and chain.get("handover") is True, chain
    text = cfg.mntui(path, "status").stdout
    assert "coordinator on node2" in text, text
    assert "node0 broke twice in a row: replaced by spare node2 (rank 0)" in text, text
    assert cfg.mntui(path, "kill").returncode == 0
    wait_for(lambda: not tagged_anywhere(job), 20, what="every process of the job gone")


def load_chain(fake: FakeCluster, job: str) -> dict[str, object]:
    """coord/chain.json on the main, as the coordinator wrote it."""
    first = fake.node("node0").run_dirs(job)[0]
    return dict(json.loads((first / "coord" / "chain.json").read_text()))


def test_a_kill_with_no_coordinator_to_ask_reaches_the_idle_spare_too(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The main's coordinator and sentinel gone together (neither starts the other
    again): `mntui kill` kills by tag directly, and the idle spare's sentinel and guard,
    which only a coordinator would have stopped, go with the rest, well within the
    `unreachable_after` after which they would have left by themselves."""
    job = "cw-idlekill"
    port, wport = free_port(), free_port()
    text = SPARE_JOB.format(job=job, port=port, wport=wport).replace(
        "unreachable_after: 5", "unreachable_after: 60"
    )
    path = cfg.write(text)
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    wait_for(lambda: len(watchers(job, "sentinel")) == 3, 20, what="3 sentinels")
    assert len(watchers(job, "guard", "node2")) == 1, "the idle spare has no guard"
    main = watchers(job, "coord") + watchers(job, "sentinel", "node0")
    assert len(main) == 2, main
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: no respawn between
        for pid in main:
            os.kill(pid, sig)
    wait_for(lambda: not alive(main), 10, what="the main's watchers gone")
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "node2" in res.stdout, res.stdout  # the spare was killed directly, and said so
    assert not tagged_anywhere(job), [cmdline(p) for p in tagged_anywhere(job)]
