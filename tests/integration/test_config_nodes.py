"""Config checks whose point is what happens on the nodes: a `ready_pattern` is checked
with grep -E, the engine the main runs it with, and a value the nodes would choke on is
refused at load time (exit 2) before any node is touched."""

from __future__ import annotations

import time

import pytest
from fakecluster import FakeCluster
from helpers import Cfg


def test_a_pattern_that_passes_the_check_matches_on_the_main(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write("""
    job: tready
    nodes: [node0, node1]
    command: sleep 1; echo "step 7 done (rank {node_rank})"; sleep 300
    launch: {ready: log, ready_pattern: '^step [0-9]+ done \\(rank 0\\)$', ready_timeout: 30}
    kill: {grace: 1}
    """)
    t0 = time.monotonic()
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    assert time.monotonic() - t0 < 20, "the main's line should have made it ready"
    assert cfg.mntui(path, "kill").returncode == 0


@pytest.mark.parametrize(
    "job, setting, message",
    [
        (
            "trefuse1",
            r"launch: {ready: log, ready_pattern: 'step \d+', ready_timeout: 5}",
            r"launch.ready_pattern: bad regular expression for grep -E: \d is not portable",
        ),
        ("trefuse2", "workdir: ~nobody/src", "workdir: ~nobody is not expanded"),
        ("trefuse3", "command: 'echo \"{master_addr}\"; sleep 300'", "inside double quotes"),
    ],
)
def test_values_the_nodes_would_choke_on_are_refused_before_launch(
    fake: FakeCluster, cfg: Cfg, job: str, setting: str, message: str
) -> None:
    command = "" if setting.startswith("command") else "command: echo 'step 1'; sleep 300"
    path = cfg.write(f"""
    job: {job}
    nodes: [node0, node1]
    {command}
    {setting}
    """)
    res = cfg.mntui(path, "launch", "--no-ui", timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr
    assert not any(n.run_dirs(job) for n in fake.nodes), "no node may have been touched"
