"""A live report's one poll on real nodes: a run whose nodes are just starting is live,
never "ended" (report/ended.py)."""

from __future__ import annotations

import shlex

from fakecluster import FakeCluster
from helpers import Cfg

from mntui.sessions.config import load_config
from mntui.sessions.launch import make_plan
from mntui.sessions.launch.plan import run_record
from mntui.sessions.report import Ending, report_now
from mntui.sessions.ssh import Cluster


def test_a_run_whose_panes_have_not_taken_the_tag_is_live(fake: FakeCluster, cfg: Cfg) -> None:
    """Held still: the moment after tmux forks each node's pane and before its shell runs
    `exec env MNTUI_RUN=... bash ./launch.sh`. Each node has the run's session, its pane
    lives, and no process carries the tag: one poll derives NOT_RUNNING everywhere, and
    the report once said the run had ended instead of taking its stacks."""
    path = cfg.write("""
    job: t-young
    nodes: [node0, node1]
    command: 'sleep 600'
    """)
    config = load_config(path)
    record = run_record(make_plan(config), config.path)
    record.create()
    with Cluster(config.nodes, config.ssh) as cluster:
        try:
            for n in record.nodes:  # an untagged pane, as tmux's shell is before its exec
                start = f"tmux new-session -d -s {shlex.quote(n.session)} 'sleep 600'"
                assert cluster.nodes[n.node].run(start, timeout=20).ok
            built = report_now(config, record, cluster)
        finally:  # untagged: the suite's sweep by tag would not find them
            for n in record.nodes:
                stop = f"tmux kill-session -t {shlex.quote('=' + n.session)}"
                cluster.nodes[n.node].run(stop, timeout=20)
    assert built.ending is Ending.LIVE, built.headline
    assert {n.state for n in built.nodes} == {"not-running"}
