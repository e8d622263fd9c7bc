"""The mirror (watch/mirror.py, clusterchain.py): this machine's records written from what
the coordinator recorded, whichever verb looked first, and what history reads of them."""

from __future__ import annotations

import time

from test_history import run_id

from mntui.sessions.history.ledger import ledger_of
from mntui.sessions.launch.board import BoardView
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, load_run
from mntui.sessions.watch.clusterchain import sync_chain


def _record(job: str, run: str) -> RunRecord:
    nodes = [
        NodeRecord(n, "127.0.0.1", i, "s", f"{job}/{run}/{n}", f".mntui/runs/{job}/{run}/{n}")
        for i, n in enumerate(("n0", "n1"))
    ]
    rec = RunRecord(job, run, "/x.yaml", "127.0.0.1", 1, nodes)
    rec.watch_port = 29501
    rec.create()
    return rec


def _teardown(k: int, run: str, at: float, first_at: float, culprit: str = "n1") -> dict:
    first = {"node": culprit, "at": first_at, "exit_code": 1, "rank": 1, "cause": None,
             "summary": "KeyError: 'x'", "secondary": False, "mistake": False,
             "why": "KeyError: 'x'"}  # fmt: skip
    end = {
        "attempt": k,
        "run_id": run,
        "state": "failed",
        "culprit": culprit,
        "exit_codes": [1],
        "progressed_for": 0.0,
        "cause": f"{culprit} rank 1 failed",
    }
    return {"attempt": k, "run": run, "started_at": at - 60, "end": end, "ended_at": at,
            "kind": "teardown", "first": first, "restart": "restart 1/2", "delay": 1.0,
            "seen": {"node": "n0", "state": "failed", "why": "exit code 1"}}  # fmt: skip


def test_a_kill_marked_after_the_attempt_had_failed_keeps_the_failure() -> None:
    """The coordinator tore attempt 0 down (n1 first) and restarted while this machine
    slept; `mntui kill` then marked attempt 0, the one recorded here. The sync that
    follows gives attempt 0 its own end (a failure history counts, detected when n1
    broke, not when it was torn down) and the kill to attempt 1."""
    job = "mirror-kill"
    run0, run1 = run_id(961), run_id(962)
    rec = _record(job, run0)
    t = time.time() - 100
    rec.update(lambda r: (setattr(r, "status", RunStatus.KILLING), r.note("kill", by="user")))
    chain = {"chain": run0, "status": "killed", "attempts": [
        _teardown(0, run0, t, first_at=t - 3.0),
        {"attempt": 1, "run": run1, "started_at": t + 5},
    ]}  # fmt: skip
    latest = sync_chain(rec, BoardView({"at": 1.0}, None, True, chain=chain))
    first, then = load_run(job, run0), load_run(job, run1)
    assert first is not None and then is not None and latest.run_id == run1
    assert first.status is RunStatus.RESTARTING, first.status
    assert then.status is RunStatus.KILLED, then.status
    ledger = ledger_of(job, run0)
    assert ledger is not None and len(ledger.losses) == 1, ledger
    loss = ledger.losses[0]
    assert loss.node == "n1" and loss.detection == 3.0, loss


def test_a_kill_before_the_attempts_end_is_the_users() -> None:
    """The kill came before the coordinator's end of the attempt (the kill's own
    teardown): the record stays killed, nothing is blamed."""
    job = "mirror-own"
    run0 = run_id(963)
    rec = _record(job, run0)
    rec.update(lambda r: (setattr(r, "status", RunStatus.KILLED), r.note("kill", by="user")))
    chain = {"chain": run0, "status": "killed",
             "attempts": [_teardown(0, run0, time.time() + 5, time.time() + 2)]}  # fmt: skip
    sync_chain(rec, BoardView({"at": 1.0}, None, True, chain=chain))
    got = load_run(job, run0)
    assert got is not None and got.status is RunStatus.KILLED


def test_a_kill_during_the_coordinators_own_teardown_leaves_it_its_failure() -> None:
    """The coordinator decided the teardown (a straggler, on_slow: kill_all) before the
    user's kill came, and its kill of the ranks ended after it: the attempt is the
    coordinator's torn-down one (its report saved, history counting it), and the kill in
    what would have been the backoff leaves it so, never `restarting`."""
    job = "mirror-late"
    run0 = run_id(964)
    rec = _record(job, run0)
    t = time.time()
    rec.update(lambda r: (setattr(r, "status", RunStatus.KILLED), r.note("kill", by="user")))
    entry = _teardown(0, run0, t + 5, first_at=t - 3.0)
    entry["decided_at"] = t - 1.0
    chain = {"chain": run0, "status": "killed", "attempts": [entry]}
    sync_chain(rec, BoardView({"at": 1.0}, None, True, chain=chain))
    got = load_run(job, run0)
    assert got is not None and got.status is RunStatus.TORN_DOWN, got.status
