"""The straggler, caught on real nodes by the cluster's watch: a rank made slow is named
by the coordinator (its sentinels sample every rank with py-spy), told, shown by
`status` and `report`; a node made slow for real (its sshd in a CPU-quota cgroup) is
named and, with `on_slow: kill_all`, the job is taken down with its report saved;
`doctor --pairs` names the throttled node (the bench's short version is in
test_cluster_stragglers.py). (A GPU's throttle
reasons were the local sampler's: the sentinels sample no clocks yet, issue 37 item 16.)"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import straggle
from fakecluster import FakeCluster, free_port, wait_for
from helpers import Cfg

from mntui.sessions.doctor.pairs import Pair, conclude, node_rows
from mntui.sessions.runs import latest

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
    assert run.notices[0].endswith("it holds the job"), run.notices
    assert run.decision is None  # on_slow: notify: no kill
    status = cfg.mntui(path, "status")  # the notice the main could not run, sent from here
    wait_for(lambda: told.exists() and "\n" in told.read_text(), 10, what="the notice")
    assert told.read_text().startswith("slow|straggler: rank 1 (node1) waits ")
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
    (the session's nodes' tmux servers are already running)."""
    with FakeCluster(tmp_path_factory.mktemp("strag"), 4).start() as cluster:
        yield cluster


@pytest.fixture
def swept(fresh: FakeCluster) -> FakeCluster:
    """`fresh` with nothing of an earlier test running: a quota or weight on a node's
    sshd reaches only what it starts afterwards, and a worker may run this module's
    tests in any order (work stealing): a tmux server left running would hold the job
    outside the cgroup."""
    fresh.stop_jobs()
    return fresh


@needs_cgroup
def test_a_node_at_half_a_cpu_is_named_and_on_slow_kill_all_takes_the_job_down(
    swept: FakeCluster, tmp_path: Path
) -> None:
    cfg = Cfg(swept, tmp_path)
    job = "stragcg"
    watch = "on_slow: kill_all, capture_budget: 0"  # py-spy at the default 4 a second
    path = job_file(cfg, job, ["node0", "node1"], "--work 0.1 --kind cpu", watch, swept)
    # node0 weighted to get its CPU first: under the suite's load a partner starved as
    # much as the throttled node left node1 no slower (node1 waited 47 %, node0 77 %)
    with (
        straggle.cpu_quota(straggle.sshd_pid(swept, "node0"), None, "fast", shares=16384),
        straggle.cpu_quota(straggle.sshd_pid(swept, "node1"), 0.5, "test"),
    ):
        run = straggle.run_once(swept, path, job, 60, stop_early=False)
    assert run.suspect is not None and run.suspect.node == "node1", run.finding
    assert run.decision is not None and run.decision["why"].startswith("straggler: rank 1")
    # the report saved at the first look after the end carries the straggler, in its
    # text and its JSON
    shown = cfg.mntui(path, "report", timeout=180).stdout
    assert shown.count("Slow node (sampled") == 1, shown
    rec = latest(job)
    assert rec is not None
    text = (rec.dir / "report.txt").read_text()
    assert "Slow node (sampled while the job ran):\n  straggler: rank 1 (node1) waits" in text
    slow = json.loads((rec.dir / "report.json").read_text())["slow"]
    assert slow[1].startswith("  straggler: rank 1 (node1) waits"), slow


@needs_cgroup
def test_doctor_pairs_names_the_throttled_node(swept: FakeCluster, tmp_path: Path) -> None:
    """node2 at a fifth of a CPU (node0, 1 and 3 weighted to get theirs first, as on an
    idle machine) is 2-3x slower in a pair, right at the rule's thresholds: in 2 of 5
    runs here round 1 found node2–node3 within 2x, and in the issue's run round 2 found
    node2 with node0 under them (issue 41). So the test asserts the rule's outcome on
    the numbers the doctor kept, not that the machine made them: those numbers give the
    printed verdict, the kept JSON and the rows; node0 and node1 are never named; and
    whenever round 1 found node2's pair slow, node2 alone is named (exit 2). The rule
    itself, on recorded numbers, is in tests/unit/test_straggler_logic.py."""
    with ExitStack() as weighted:
        for n in ("node0", "node1", "node3"):
            pid = straggle.sshd_pid(swept, n)
            weighted.enter_context(straggle.cpu_quota(pid, None, f"fast{n}", shares=16384))
        res = straggle.doctor_pairs(swept, tmp_path / "pairs.yaml", 0.2)
    line = next(x for x in res.stdout.splitlines() if x.startswith("pairs: "))
    print(f"\nMEASURED doctor --pairs, node2 at 0.2 CPU: {line}")
    from mntui.sessions.errors import state_dir

    (kept,) = (state_dir() / "pairs" / "doctor").glob("doctor-pairs-*.json")
    data = json.loads(kept.read_text())
    pairs = [Pair(**p) for p in data["pairs"]]
    measured = "\n".join(
        f"round {p.round} {p.a}-{p.b}: {p.latency_us} us {p.algbw_gbps} GB/s slow={p.slow}"
        for p in pairs
    )
    first, second = [p for p in pairs if p.round == 1], [p for p in pairs if p.round == 2]
    assert [(p.a, p.b) for p in first] == [("node0", "node1"), ("node2", "node3")], measured
    v = conclude(first, second, ["node0", "node1", "node2", "node3"])
    assert line == f"pairs: {v.line}" and data["line"] == v.line, measured
    assert data["slow_nodes"] == list(v.slow_nodes), measured
    assert data["slow_links"] == [list(link) for link in v.slow_links], measured
    rows = [x.split() for x in res.stdout.splitlines()]
    failed = {r[0] for r in rows if r[1:3] == ["pairs", "FAIL"]}
    assert {r[0] for r in rows if r[1:2] == ["pairs"]} == {"node0", "node1", "node2", "node3"}
    assert failed == {r[0] for r in node_rows(v) if r[3] != "ok"}, res.stdout
    assert not failed & {"node0", "node1"}, measured
    if first[1].slow:
        assert line.startswith("pairs: node2 is slow: all-reduce "), measured
        assert v.slow_nodes == ("node2",) and v.slow_links == (), measured
        assert res.returncode == 2  # a slow node fails the doctor
    else:
        assert line.startswith("pairs: no slow node or link"), measured
        assert not failed and not second, measured
