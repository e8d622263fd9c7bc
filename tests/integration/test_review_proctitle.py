"""Issue 39, finding 3: processes that lose the tag escaped the watch and the kill.
`setproctitle` (many training stacks use it) writes the title over the environment, so
/proc/PID/environ no longer holds MNTUI_RUN, and the tag was the only rule of what is the
job's. A helper the rank started in a session of its own outlived `mntui kill`, which
said "clean: 6 process(es) ... stopped"; a rank that named itself at start was never seen
by its sentinel (frozen: no decision). The rule now (node/proc/proctree.py): the tag, or a
descendant of the pane or of a member, or a member seen before, or the run's cgroup.
The job is tests/integration/sptjob.py (needs the `setproctitle` package)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from clusterwatch import nothing_left, run_dir
from fakecluster import FakeCluster, alive, free_port, wait_for
from helpers import Cfg, step_count
from test_cluster_faults import decision, read_json, told_on_failure

pytestmark = pytest.mark.integration
pytest.importorskip("setproctitle")
PY = sys.executable  # the test venv's, with setproctitle
JOB = str(Path(__file__).with_name("sptjob.py"))
NODES = ("node0", "node1")


def _config(cfg: Cfg, job: str, mode: str, piddir: Path) -> tuple[Path, int, int]:
    port, wport = free_port(), free_port()
    body = f"""
    job: {job}
    nodes: [node0, node1]
    master_port: {port}
    command: exec {PY} {JOB} {{node_rank}} {port} {mode} {piddir}
    launch: {{ready_timeout: 20}}
    kill: {{grace: 2}}
    watch: {{where: cluster, port: {wport}, unreachable_after: 4, frozen_after: 2}}
    """
    return cfg.write(body), port, wport


def _pids(piddir: Path, what: str) -> list[int]:
    """The job's own word on its pids (rank-R.pid, helper-R.pid): read once all are there."""
    files = [piddir / f"{what}-{r}.pid" for r in range(len(NODES))]
    wait_for(lambda: all(f.exists() for f in files), 60, what=f"every {what}'s pid")
    return [int(f.read_text()) for f in files]


@contextmanager
def _killed_at_the_end(piddir: Path) -> Iterator[None]:
    """What the job wrote down is killed by pid whatever happens: a renamed process
    carries neither the job's tag nor the fake node's."""
    try:
        yield
    finally:
        for f in piddir.glob("*.pid"):
            for pid in alive([int(f.read_text())]):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("watched", [True, False], ids=["cluster", "no-watch"])
def test_a_helper_that_names_itself_in_a_session_of_its_own_does_not_survive_a_kill(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path, watched: bool
) -> None:
    """Watched by the cluster the sentinels kill it (a child of their rank); with
    `--no-watch` the manager's kill over SSH does (the same kill on the node)."""
    job = f"node-sptk{'c' if watched else 'd'}"
    path, port, wport = _config(cfg, job, "helper", tmp_path)
    with told_on_failure(fake, job), _killed_at_the_end(tmp_path):
        res = cfg.mntui(path, "launch", "--no-ui", watch=watched)
        assert res.returncode == 0, res.stdout + res.stderr
        helpers = _pids(tmp_path, "helper")
        assert alive(helpers) == helpers
        assert all(b"MNTUI_RUN" not in Path(f"/proc/{p}/environ").read_bytes() for p in helpers)
        k = cfg.mntui(path, "kill")
        said = k.stdout + k.stderr
        assert k.returncode == 0 and "clean:" in said, said
        wait_for(lambda: not alive(helpers), 5, what=f"the helpers {helpers} gone")
        nothing_left(fake, job, (port, wport))


def test_a_double_forked_helper_with_a_clean_environment_is_found_by_the_runs_cgroup(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """No tag (`env -i`, then setproctitle), no parent of the job (double-forked, an
    orphan of init), no sentinel (`--no-watch`): only the run's own cgroup, which
    launch.sh makes where this user may (root here; a systemd user scope)."""
    job = "node-sptcg"
    path, port, wport = _config(cfg, job, "orphan", tmp_path)
    with told_on_failure(fake, job), _killed_at_the_end(tmp_path):
        res = cfg.mntui(path, "launch", "--no-ui")
        assert res.returncode == 0, res.stdout + res.stderr
        helpers = _pids(tmp_path, "helper")
        if not all((run_dir(fake, job, n) / "cgroup").exists() for n in NODES):
            pytest.skip("this machine lets no run make a cgroup of its own")
        ranks = _pids(tmp_path, "rank")
        assert all(f"PPid:\t{r}\n" not in Path(f"/proc/{h}/status").read_text()
                   for r, h in zip(ranks, helpers, strict=True))  # fmt: skip
        k = cfg.mntui(path, "kill")
        said = k.stdout + k.stderr
        assert k.returncode == 0 and "clean:" in said, said
        wait_for(lambda: not alive(helpers), 5, what=f"the helpers {helpers} gone")
        nothing_left(fake, job, (port, wport))
        groups = [Path((run_dir(fake, job, n) / "cgroup").read_text().strip()) for n in NODES]
        assert not any(g.exists() for g in groups), groups  # the kill removed them, empty


def test_a_rank_that_names_itself_at_start_is_seen_by_its_sentinel(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """Followed as the pane's descendant: seen running, and torn down when it freezes."""
    job = "node-spts"
    path, port, wport = _config(cfg, job, "self", tmp_path)
    with told_on_failure(fake, job), _killed_at_the_end(tmp_path):
        res = cfg.mntui(path, "launch", "--no-ui", watch=True)
        assert res.returncode == 0, res.stdout + res.stderr
        ranks = _pids(tmp_path, "rank")
        wait_for(lambda: all(step_count(fake.node(n).log(job)) >= 5 for n in NODES), 60,
                 what="both ranks stepping")  # fmt: skip
        board = run_dir(fake, job, "node0") / "coord" / "status.json"

        def running() -> bool:
            nodes = (read_json(board) or {}).get("nodes") or {}
            return all((nodes.get(n) or {}).get("state") == "running" for n in NODES)

        wait_for(running, 20, what="both nodes running on the coordinator's board")
        assert decision(fake, job) is None
        os.kill(ranks[1], signal.SIGSTOP)  # frozen_after is 2 s
        d = wait_for(lambda: decision(fake, job), 20, what="the coordinator's decision")
        assert isinstance(d, dict) and (d["node"], d["state"]) == ("node1", "frozen"), d
        wait_for(lambda: not alive(ranks), 10, what=f"the ranks {ranks} gone")
        nothing_left(fake, job, (port, wport))
