"""What only this machine's supervisor did, done by the cluster's watch (issue 37):
restarts whose main is ready by its log (`launch.ready: log`), and more than 10 of
them, all while this machine is cut off (a laptop asleep: SSH to every node hangs).

Real parts: sshd fake nodes, tmux, a light 2-node job (plain python3, no torch), the
sentinel bundle on the nodes. The notify command on the main is in
test_cluster_notify.py; a node whose python3 comes after `setup`, and one with none,
in test_cluster_watch.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from clusterwatch import cut_off, launched, nothing_left, runs_on
from fakecluster import FakeCluster, free_port, wait_for
from helpers import Cfg, step_count

from mntui.sessions.node.rules.runid import RUN_ID
from mntui.sessions.runs import latest

pytestmark = pytest.mark.integration

# The main is ready when its log says so, 1.5 s after it starts; it never listens on
# the master port, so a restart that waited for the port would never start its workers.
LOG_READY = """
job: {job}
nodes: [node0, node1]
master_port: {port}
command: >-
  exec python3 -c "import itertools, sys, time; r = int(sys.argv[1]);
  print('started at', time.time(), flush=True);
  r == 0 and (time.sleep(1.5), print('ready at', time.time(), flush=True));
  [(print('step', i, flush=True), time.sleep(0.1)) for i in itertools.count(1)]"
  {{node_rank}}
launch: {{ready: log, ready_pattern: '^ready at [0-9.]+$', ready_timeout: 20}}
kill: {{grace: 2}}
watch: {{port: {wport}, unreachable_after: 5, frozen_after: 2}}
restart: {{max: 1, backoff: 0.5}}
"""


def _stamp(log: str, what: str) -> float:
    found = re.search(rf"^{what} at ([0-9.]+)$", log, re.M)
    assert found is not None, log[-2000:]
    return float(found[1])


def load_chain(fake: FakeCluster, job: str) -> dict[str, Any]:
    first = fake.node("node0").run_dirs(job)[0]
    try:
        return dict(json.loads((first / "coord" / "chain.json").read_text()))
    except (OSError, ValueError):
        return {}


def journal(fake: FakeCluster, job: str, kind: str) -> list[dict[str, Any]]:
    path: Path = fake.node("node0").run_dirs(job)[0] / "coord" / "journal.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [e for e in lines if e.get("kind") == kind]


def test_a_restart_starts_its_workers_once_the_mains_log_says_ready(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """`launch.ready: log` with restarts, watched by the cluster (before issue 37, `auto`
    watched it from this machine): node1's rank dies while this machine is cut off; the
    coordinator starts attempt 1's main, waits until its output matches the pattern
    (grep -E on the main), then starts the worker."""
    job = "cp-logready"
    port, wport = free_port(), free_port()
    path = cfg.write(LOG_READY.format(job=job, port=port, wport=wport))
    launched(cfg, path, job, fake)
    first = next(iter(runs_on(job, "node1")))
    with cut_off(fake):
        with contextlib.suppress(ProcessLookupError):
            os.kill(runs_on(job, "node1")[first][0], signal.SIGKILL)
        wait_for(
            lambda: all(set(runs_on(job, n)) - {first} for n in ("node0", "node1")),
            60,
            what="attempt 1 running on both nodes, started by the coordinator",
        )
        wait_for(
            lambda: step_count(fake.node("node1").log(job)) >= 3, 30, what="attempt 1 training"
        )
        main, worker = fake.node("node0").log(job), fake.node("node1").log(job)
    main_start, ready = _stamp(main, "started"), _stamp(main, "ready")
    worker_start = _stamp(worker, "started")
    (asked,) = [e for e in journal(fake, job, "attempt") if e["data"]["attempt"] == 1]
    print(
        f"ready: log restart: attempt start -> main up {main_start - asked['t']:.2f}s, "
        f"main's ready line after {ready - main_start:.2f}s, worker started "
        f"{worker_start - ready:.2f}s after it ({worker_start - asked['t']:.2f}s after the "
        "attempt's start)"
    )
    assert worker_start >= ready, (worker_start, ready)  # it waited for the log
    assert worker_start - ready < 5.0  # and not for a timeout
    text = cfg.mntui(path, "status").stdout
    assert "attempt 2/2" in text and "(running)" in text, text
    assert cfg.mntui(path, "kill").returncode == 0
    nothing_left(fake, job, (port, wport))


# Every attempt fails by itself: a restart after 3 s, the first once the test lets it
# (the launch confirms it watched first): 13 attempts, 12 restarts in a row
MANY = """
job: {job}
nodes: [node0, node1]
master_port: {port}
command: >-
  echo "restart count $MNTUI_RESTART_COUNT {{restart_count}}";
  exec python3 -c "import itertools, os, socket, sys, time; r = int(sys.argv[1]);
  s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
  r == 0 and (s.bind(('127.0.0.1', {port})), s.listen());
  [(print('step', i, flush=True), time.sleep(0.1)) for i in itertools.takewhile(
  lambda i: i < 30 if int(sys.argv[2]) else not os.path.exists(sys.argv[3]),
  itertools.count(1))]; sys.exit(1)" {{node_rank}} {{restart_count}} {flag}
launch: {{ready_timeout: 20}}
kill: {{grace: 2}}
watch: {{port: {wport}, unreachable_after: 5, frozen_after: 2}}
restart: {{max: 12, backoff: 0}}
"""


def test_more_than_ten_restarts_each_its_own_run_and_count(fake: FakeCluster, cfg: Cfg) -> None:
    """`restart.max: 12` (before issue 37, more than 10 was this machine's supervisor's):
    one template per node at launch, and the coordinator names each attempt's run by
    the launch's rule; every attempt runs with its own run dir, tag and
    MNTUI_RESTART_COUNT (`{restart_count}` too), and `status` and `history` show them
    all once this machine looks."""
    job = "cp-many"
    port, wport = free_port(), free_port()
    flag = cfg.tmp / "fail-now"
    path = cfg.write(MANY.format(job=job, port=port, wport=wport, flag=flag))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "watched by the cluster" in res.stdout and "cannot watch" not in res.stdout, res.stdout
    with cut_off(fake):
        flag.touch()
        wait_for(
            lambda: load_chain(fake, job).get("status") == "gave-up",
            240,
            what="12 restarts in a row, then the chain gives up",
        )
    chain = load_chain(fake, job)
    attempts = chain["attempts"]
    runs = [a["run"] for a in attempts]
    assert [a["attempt"] for a in attempts] == list(range(13)), attempts
    assert len(set(runs)) == 13 and all(RUN_ID.fullmatch(r) for r in runs), runs
    gaps = [b["started_at"] - a["ended_at"] for a, b in itertools.pairwise(attempts)]
    print(f"12 restarts on the cluster: attempt 1 started to the chain's end "
          f"{chain['ended_at'] - attempts[1]['started_at']:.1f}s; an attempt's end to the "
          f"next one's start {min(gaps):.2f}-{max(gaps):.2f}s (backoff 0)")  # fmt: skip
    by_run = {a["run"]: a["attempt"] for a in attempts}
    for node in ("node0", "node1"):
        dirs = fake.node(node).run_dirs(job)
        assert {d.parent.name for d in dirs} == set(runs), (node, dirs)
        for d in dirs:
            k = by_run[d.parent.name]
            said = (d / "output.log").read_text()
            assert f"restart count {k} {k}\n" in said, (node, k, said[:300])
    nothing_left(fake, job, (port, wport))
    text = cfg.mntui(path, "status").stdout
    assert "(gave-up)" in text and "attempt 13/13" in text, text
    assert "gave up after 12 restart(s) in a row" in text, text
    hist = cfg.mntui(path, "history").stdout
    assert "gave-up after 13 attempt(s)" in hist, hist
    rec = latest(job)
    assert rec is not None and rec.attempt == 12 and rec.run_id == runs[-1], rec
