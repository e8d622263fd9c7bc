"""Across runs, on real sshd nodes: a node's failure history, the quarantine that keeps
it out (refused, or a spare in its place; gone when it expires; by policy, with a
notification), and the goodput ledger of a chain with two failures, as the cluster's
coordinator ran the chain and this machine's looks (`status`) recorded it. The failing
runs are tests/jobs/faulty_steps.py (test_restart's failures without torch: what is
tested is the records, the history and the ledger, not torchrun)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg, free_port, listener_job
from test_restart import LIGHT, chain, job_yaml

from mntui.sessions.history import quarantines
from mntui.sessions.runs import RunRecord, latest


def faulty_yaml(job: str, work: Path, args: str, extra: str) -> str:
    """test_restart's job, with checkpoint lines the ledger counts lost work from."""
    return job_yaml(
        job, work, args, f"checkpoint_pattern: 'step (?P<step>3) loss'\n    {extra}", "", True
    )


def note(rec: RunRecord, what: str) -> dict[str, object]:
    return next(h for h in reversed(rec.history) if h["what"] == what)


def test_a_node_failing_in_three_runs_tops_the_history_and_the_ledger_matches_the_records(
    fake: FakeCluster, cfg: Cfg
) -> None:
    work = cfg.tmp / "work"
    work.mkdir()
    shutil.copy(LIGHT, work / "faulty_steps.py")
    once = cfg.write(
        faulty_yaml("honce", work, "--fail-rank 1 --fail-step 4 --how exit3", ""), "once.yaml"
    )
    assert cfg.mntui(once, "launch", "--no-ui", watch=True).returncode == 0

    def once_failed() -> bool:
        runs = chain(cfg, "honce", once)
        cfg.mntui(once, "report")  # the first look after the end saves its report
        return (
            bool(runs)
            and runs[-1].status.value in ("torn-down", "failed")
            and (runs[-1].dir / "report.json").exists()
        )

    wait_for(once_failed, 120, interval=1.0, what="the first job failed")
    # the coordinator counts quarantine_after within its chain: node1's 2 failures there
    extra = ("restart: {max: 3, backoff: 1, quarantine_after: {count: 2, within: 1h, for: 1h}}\n"
             "    spares: [node2]\n"
             f"    notify: {{command: 'echo \"$MNTUI_EVENT $MNTUI_SUMMARY\" >> {cfg.tmp}/notices'}}")  # fmt: skip
    # node1 fails 3 s in (step 15): its sentinel follows the steps before the failure
    path = cfg.write(faulty_yaml("hchain", work, "--fail-rank 1 --fail-step 15 --how exit3 "
                                 "--fail-attempts 2 --steps 16", extra))  # fmt: skip
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    wait_for(lambda: [r.status.value for r in chain(cfg, "hchain", path)] == ["restarting",
             "restarting", "finished"], 300, interval=1.0,
             what="two failures, then finished")  # fmt: skip
    cfg.mntui(path, "report")  # the first look after their ends saves each failure's report
    runs = chain(cfg, "hchain", path)

    res = cfg.mntui(path, "history", "--job", "hchain", "--json")
    assert res.returncode == 0, res.stderr
    (ledger,) = json.loads(res.stdout)["chains"]
    assert ledger["attempts"] == 3 and len(ledger["losses"]) == 2
    for loss, failed, nxt in zip(ledger["losses"], runs[:-1], runs[1:], strict=True):
        report = json.loads((failed.dir / "report.json").read_text())
        # torn down by the coordinator, or (both ranks out at once) ended by itself
        torn = [h for h in failed.history if h["what"] == "watchdog-teardown"]
        teardown_at = float(torn[-1]["at"]) if torn else float(report["ended_at"])
        first_step = float(note(nxt, "steps")["first_step_at"])  # type: ignore[arg-type]
        assert abs(loss["detection"] - (teardown_at - report["first_at"])) < 0.1
        assert abs(loss["recovery"] - (first_step - teardown_at)) < 0.1
        assert loss["node"] == "node1", loss
    text = cfg.mntui(path, "history").stdout
    assert "hchain chain" in text and "2 failure(s)" in text and "GPU-h" in text
    assert "hchain chain" in cfg.mntui(path, "status").stdout

    res = cfg.mntui(path, "nodes", "--history")
    assert res.returncode == 0, res.stderr
    table = res.stdout.splitlines()
    assert table[1].startswith("node1 [quarantined]") and " 3 " in table[1], res.stdout
    assert "failed×3" in table[1]
    listed = cfg.mntui(path, "quarantine", "--list").stdout
    assert "node1" in listed and "coordinator on node0" in listed, listed
    assert "caused 2 failures" in listed, listed

    def told() -> bool:
        cfg.mntui(path, "status")  # a command is this machine's: run at its next look
        notices = cfg.tmp / "notices"
        return notices.exists() and "quarantined node1" in notices.read_text()

    wait_for(told, 30, interval=1.0, what="the quarantine's notification")
    print(f"\nPASTE mntui history:\n{text}\nPASTE mntui nodes --history:\n{res.stdout}")


def test_a_quarantined_node_refuses_a_launch_takes_a_spare_and_expires(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "hquar"
    path = cfg.write(listener_job(job, free_port()))
    res = cfg.mntui(path, "quarantine", "node1", "--for", "1h", "--why", "XID 79")
    assert res.returncode == 0 and "quarantined node1" in res.stdout, res.stderr
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 1 and not tagged(job)
    (line,) = [x for x in res.stderr.splitlines() if x]
    assert "node1 is quarantined" in line and "XID 79" in line and "--release node1" in line

    spare = cfg.write(listener_job(job, free_port(), extra="spares: [node2]"), "spare.yaml")
    res = cfg.mntui(spare, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "node1 is quarantined: replaced by spare node2 (rank 1)" in res.stdout + res.stderr
    rec = latest(job)
    assert rec is not None and [(n.node, n.rank) for n in rec.nodes] == [("node0", 0), ("node2", 1)]
    assert cfg.mntui(spare, "kill").returncode == 0

    res = cfg.mntui(path, "quarantine", "--release", "node1")
    assert "released node1" in res.stdout
    assert cfg.mntui(path, "quarantine", "node1", "--for", "1").returncode == 0
    wait_for(lambda: "no node is quarantined" in cfg.mntui(path, "quarantine", "--list").stdout,
             15, what="the quarantine expired")  # fmt: skip
    assert not list(quarantines.folder().glob("*.json"))
    res = cfg.mntui(path, "launch", "--no-ui")
    assert res.returncode == 0, res.stdout + res.stderr
    rec = latest(job)
    assert rec is not None and [n.node for n in rec.nodes] == ["node0", "node1"]
    assert cfg.mntui(path, "kill").returncode == 0
    wait_for(lambda: not tagged(job), 30, what="nothing left running")
