"""The review of the stand-by by a lost main (issue 30, session 5), on real nodes: a
worker whose ranks had already ended when it lost the main still gives its word, so
the stand-by replaces the main instead of waiting forever; and the old attempt's stop
(recover/mainswap.stop_old) reaches that attempt alone: a later run of the same job on
the same nodes, its tmux session included, is left running."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

from clusterwatch import SPARE_JOB, runs_on
from fakecluster import FakeCluster, alive, free_port, pids_with_env, wait_for
from helpers import Cfg
from test_cluster_mainswap import _lose_main, _release, _said

from mntui.sessions.config import load_config
from mntui.sessions.events import Event
from mntui.sessions.launch import ChainView, run_config
from mntui.sessions.launch.tmux import session_name
from mntui.sessions.recover.mainswap import stop_old
from mntui.sessions.runs import latest
from mntui.sessions.watch import start_detached

# rank 1 ends at once with exit 0 (a worker done early): node1 runs nothing of the job
# when the main is lost; rank 0 runs on
DONE_EARLY = SPARE_JOB.replace("r = int(sys.argv[1]);", "r = int(sys.argv[1]); r and sys.exit(0);")


def _exit_code(fake: FakeCluster, job: str, node: str, run: str) -> str | None:
    path = fake.node(node).home / ".mntui" / "runs" / job / run / node / "exit_code"
    return path.read_text().strip() if path.exists() else None


def test_a_worker_with_nothing_left_still_lets_the_main_be_replaced(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """node1's rank exited 0 before node0 (the main) died as a host does: node1's
    sentinel has nothing to kill, yet says it lost the main (lost.json, nothing left),
    and this machine starts attempt 1 on node2 + node1. Before: node1's sentinel left
    without a word and the stand-by waited for it forever."""
    job = "cw-doneearly"
    assert "sys.exit(0)" in DONE_EARLY
    path = cfg.write(DONE_EARLY.format(job=job, port=free_port(), wport=free_port()))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: runs_on(job, "node0"), 30, what="rank 0")
    first = next(iter(runs_on(job, "node0")))
    wait_for(lambda: _exit_code(fake, job, "node1", first) == "0", 30, what="rank 1 done")
    record = latest(job)
    assert record is not None and record.run_id == first
    stand = start_detached(load_config(path), record)
    log = record.dir / "watch.log"
    held: list[int] = []
    try:
        wait_for(lambda: _said(log, "standing by"), 30, what="the stand-by's first look")
        held = _lose_main(fake)
        t0 = time.monotonic()
        word = fake.node("node1").home / ".mntui" / "runs" / job / first / "node1" / "lost.json"
        wait_for(word.exists, 30, what="node1's lost.json (before: none, its ranks gone)")
        lost = json.loads(word.read_text())
        assert lost.get("nothing_left") is True, lost
        assert "nothing of the job was left to kill" in lost["why"], lost
        try:
            wait_for(lambda: runs_on(job, "node2"), 45, what="attempt 1 on node2, the new main")
        except TimeoutError as e:  # what the stand-by did, for whoever reads the failure
            said = log.read_text(errors="replace")
            raise AssertionError(f"{e}\nthe stand-by's log:\n{said}") from None
        print(
            f"main lost, worker done early -> attempt 1 on node2 in {time.monotonic() - t0:.1f} s"
        )
    finally:
        _release(stand.pid, held)
        cfg.mntui(path, "kill")


def _start_later(fake: FakeCluster, job: str, run: str, node: str, tmux: bool) -> None:
    """A later run of `job` on `node`: a rank (in the job's tmux session on the node,
    started in the later run's dir as a launch starts it, when `tmux`) and a sentinel."""
    d = f'"$HOME"/.mntui/runs/{job}/{run}/{node}'
    tag = f"{job}/{run}/{node}"
    rank = f"exec env MNTUI_RUN={tag} sleep 600"
    start = (
        f"tmux new-session -d -s {session_name(job, node)} -c {d} '{rank}'"
        if tmux
        else f"setsid env MNTUI_RUN={tag} sleep 600 </dev/null >/dev/null 2>&1 &"
    )
    sentinel = f"setsid env MNTUI_RUN={tag}/sentinel sleep 600 </dev/null >/dev/null 2>&1 &"
    res = fake.ssh(node, f"mkdir -p {d} && cd {d} || exit 1\n{start}\n{sentinel}\n")
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_old_attempts_stop_leaves_a_later_run_on_the_same_nodes(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """Attempt 0 runs on node0 + node1 with node2 its idle spare; a later run of the job
    runs on node1 (a rank and a sentinel) and node2 (a rank in the job's tmux session,
    and a sentinel). The stop of attempt 0 on all three leaves nothing of attempt 0,
    closes its tmux sessions, and every process and session of the later run lives; the
    nodes it runs on are said not clean, so no new attempt is started onto them.
    Before: the stop matched job+node, and took the later run down with it."""
    job = "cw-oldstop"
    path = cfg.write(SPARE_JOB.format(job=job, port=free_port(), wport=free_port()))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    later = "29991231-235959-ffff"
    ours = f"MNTUI_RUN={re.escape(job)}/{later}/node[12](/sentinel)?"
    try:
        wait_for(lambda: runs_on(job, "node0") and runs_on(job, "node1"), 30, what="both ranks")
        rec = latest(job)
        assert rec is not None
        _start_later(fake, job, later, "node1", tmux=False)
        _start_later(fake, job, later, "node2", tmux=True)
        wait_for(lambda: len(alive(pids_with_env(ours))) == 4, 10, what="the later run's 4")
        kept = alive(pids_with_env(ours))
        old = f"MNTUI_RUN={re.escape(job)}/{rec.run_id}/.*"
        assert alive(pids_with_env(old)), "attempt 0's ranks and watchers"
        config = load_config(path)
        said: list[Event] = []
        dirty = stop_old(config, run_config(config, ChainView((rec,))), rec,
                         ["node0", "node1", "node2"], None, said.append)  # fmt: skip
        # where the later run runs, no new attempt goes (the relaunch's preflight would
        # stop every run of the job there): said, and left alone
        assert sorted(dirty) == ["node1", "node2"], [e.message for e in said]
        assert any("another run of" in e.message for e in said)
        assert not alive(pids_with_env(old)), "nothing of attempt 0 is left"
        assert alive(kept) == kept, "the later run lives, on node1 as on node2"
        assert session_name(job, "node1") not in fake.node("node1").sessions()
        assert session_name(job, "node2") in fake.node("node2").sessions(), "the later run's"
    finally:
        for pid in alive(pids_with_env(ours)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        cfg.mntui(path, "kill")
