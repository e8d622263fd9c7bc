"""The straggler, caught on real nodes: a rank made slow is named by the watchdog's
sampler (py-spy on every rank), told, shown by `status` and `report`; a node made slow
for real (its sshd in a CPU-quota cgroup) is named and, with `on_slow: kill_all`, the job
is taken down; `doctor --pairs` names the throttled node."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import straggle
from fakecluster import FakeCluster, free_port, wait_for
from helpers import Cfg

from mntui.sessions.runs import latest
from mntui.sessions.watch import WatchOutcome

REPO = Path(__file__).resolve().parents[2]
needs_cgroup = pytest.mark.skipif(not straggle.can_throttle(), reason="no writable cgroup v1 cpu")


def job_file(
    cfg: Cfg, job: str, nodes: list[str], args: str, watch: str, fake: FakeCluster, extra: str = ""
) -> Path:
    work = cfg.tmp / "work"
    work.mkdir(exist_ok=True)
    (work / "straggler_train.py").write_bytes(straggle.JOB_SCRIPT.read_bytes())
    body = straggle.job_yaml(job, nodes, free_port(), work, args, watch, extra)
    path = cfg.tmp / f"{job}.yaml"
    path.write_text(
        textwrap.dedent(body).strip()
        + f"\nssh: {{config: {fake.ssh_config}, connect_timeout: 5}}\n"
    )
    return path


def test_a_slow_rank_is_named_told_and_shown(fake: FakeCluster, cfg: Cfg) -> None:
    job = "stragrank"
    args = "--work 0.1 --kind sleep --slow-rank 1 --slow-factor 3"
    told = cfg.tmp / "told"
    notify = f"""notify: {{command: 'printf "%s|%s\\n" "$MNTUI_EVENT" "$MNTUI_SUMMARY" >>{told}', on: [slow]}}"""
    path = job_file(cfg, job, ["node0", "node1"], args, "sample_every: 0.5", fake, notify)
    run = straggle.run_once(fake, path, job, 40, stop_early=True)
    assert run.suspect is not None, run.finding
    assert (run.suspect.rank, run.suspect.node) == (1, "node1")
    assert run.notices and run.notices[0].startswith("straggler: rank 1 (node1) waits ")
    assert run.notices[0].endswith("it holds the job (on_slow: notify)")
    assert run.end is not None and run.end.outcome is WatchOutcome.STOPPED  # notify: no kill
    wait_for(lambda: told.exists() and "\n" in told.read_text(), 10, what="the notice")
    assert told.read_text().startswith("slow|straggler: rank 1 (node1) waits ")
    status = cfg.mntui(path, "status")
    line = next(x for x in status.stdout.splitlines() if x.startswith("straggler: "))
    print(line)  # the README quotes it
    assert "rank 1 (node1) waits" in line
    data = json.loads(cfg.mntui(path, "status", "--json").stdout)
    assert data["straggler"]["suspect"]["rank"] == 1
    report = cfg.mntui(path, "report")
    assert "Slow node (sampled while the job ran):" in report.stdout, report.stdout + report.stderr
    print(report.stdout[report.stdout.index("Slow node") :])


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    """Nodes of our own: a quota on a node's sshd reaches only what it starts afterwards
    (the session's nodes' tmux servers are already running). node3 has a GPU held by its
    power cap: a recorded real nvidia-smi answer (tests/data/nvidia-smi)."""
    data = REPO / "tests" / "data"
    path = os.pathsep.join(
        [str(data / "fakebin"), str(Path(sys.executable).parent), "/usr/bin", "/bin"]
    )
    smi = str(data / "nvidia-smi" / "h100-powercap.throttle.csv")
    env = {"node3": {"PATH": path, "FAKE_NVIDIA_SMI_GPU": smi}}
    with FakeCluster(tmp_path_factory.mktemp("strag"), 4, node_env=env).start() as cluster:
        yield cluster


@pytest.fixture
def swept(fresh: FakeCluster) -> FakeCluster:
    """`fresh` with nothing of an earlier test running: a quota or weight on a node's
    sshd reaches only what it starts afterwards, and a worker may run this module's
    tests in any order (work stealing): a tmux server left running would hold the job
    outside the cgroup."""
    fresh.stop_jobs()
    return fresh


def test_a_throttled_gpu_is_named_with_its_reason(fresh: FakeCluster, tmp_path: Path) -> None:
    cfg = Cfg(fresh, tmp_path)
    job = "stragsmi"
    path = job_file(cfg, job, ["node2", "node3"], "--work 0.1", "sample_every: 0.5", fresh)
    run = straggle.run_once(fresh, path, job, 4, stop_early=False)
    line = "a GPU of node3 is throttled at 1590/1980 MHz: power cap (SW) (700 W, 71 °C)"
    assert run.notices == [f"throttled: {line}"]  # once, however many rounds saw it
    assert run.suspect is None
    status = cfg.mntui(path, "status").stdout
    assert f"throttled: {line}" in status.splitlines()


@needs_cgroup
def test_a_node_at_half_a_cpu_is_named_and_on_slow_kill_all_takes_the_job_down(
    swept: FakeCluster, tmp_path: Path
) -> None:
    cfg = Cfg(swept, tmp_path)
    job = "stragcg"
    watch = "sample_every: 0.5, on_slow: kill_all, capture_budget: 0"
    path = job_file(cfg, job, ["node0", "node1"], "--work 0.1 --kind cpu", watch, swept)
    # node0 weighted to get its CPU first: under the suite's load a partner starved as
    # much as the throttled node left node1 no slower (node1 waited 47 %, node0 77 %)
    with (
        straggle.cpu_quota(straggle.sshd_pid(swept, "node0"), None, "fast", shares=16384),
        straggle.cpu_quota(straggle.sshd_pid(swept, "node1"), 0.5, "test"),
    ):
        run = straggle.run_once(swept, path, job, 60, stop_early=False)
    assert run.suspect is not None and run.suspect.node == "node1", run.finding
    assert run.end is not None and run.end.outcome is WatchOutcome.TORN_DOWN
    assert run.end.trigger is not None and run.end.trigger.why.startswith("straggler: rank 1")
    # the saved report carries the straggler, in its text and its JSON
    rec = latest(job)
    assert rec is not None
    text = (rec.dir / "report.txt").read_text()
    assert "Slow node (sampled while the job ran):\n  straggler: rank 1 (node1) waits" in text
    slow = json.loads((rec.dir / "report.json").read_text())["slow"]
    assert slow[1].startswith("  straggler: rank 1 (node1) waits"), slow
    shown = cfg.mntui(path, "report").stdout
    assert shown.count("Slow node (sampled") == 1, shown


@needs_cgroup
def test_doctor_pairs_names_the_throttled_node(swept: FakeCluster, tmp_path: Path) -> None:
    res = straggle.doctor_pairs(swept, tmp_path / "pairs.yaml", 0.2)
    line = next(x for x in res.stdout.splitlines() if x.startswith("pairs: "))
    print(f"\nMEASURED doctor --pairs, node2 at 0.2 CPU: {line}")
    assert line.startswith("pairs: node2 is slow: all-reduce "), res.stdout
    assert res.returncode == 2  # a slow node fails the doctor
    rows = [x.split() for x in res.stdout.splitlines() if " pairs " in f" {x} "]
    assert {r[0]: r[2] for r in rows if len(r) > 2} == {
        "node0": "PASS", "node1": "PASS", "node2": "FAIL", "node3": "PASS"
    }  # fmt: skip
    from mntui.sessions.errors import state_dir

    (kept,) = (state_dir() / "pairs" / "doctor").glob("doctor-pairs-*.json")
    data = json.loads(kept.read_text())
    assert data["slow_nodes"] == ["node2"] and data["pairs"][0]["round"] == 1
