"""The restarts the cluster's coordinator made, written into this machine's records on
its next contact.

Why: `history`, the ledger, `status` and `report` read run records; the coordinator
restarts while this machine may be asleep, so a restart has no record here until the
manager reads `coord/chain.json`. Each attempt the coordinator started gets a record
(its run id, its chain, its number, the earlier attempts' ends), and each attempt's end
moves its record (`restarting`, then `torn-down`, `failed`, `finished` or `gave-up`). A record
already ended here (a user's kill) keeps its ending. An attempt's record has the nodes
the chain says it ran on (a spare swapped in takes its rank, reached at the host the
first record noted for it), and a node the chain quarantined is quarantined here too
(sparesync.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Any

from mntui.sessions.history.stepclock import CLOCK_KEYS, REFRESH, coordinator_clock, note_plain
from mntui.sessions.launch.board import SWAP_NOTE, BoardView
from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.rules.chainstates import ChainStatus, OutcomeKind, status_of
from mntui.sessions.node.rules.runid import RUN_ID
from mntui.sessions.runs import RunRecord, RunStatus, load_run
from mntui.sessions.termsafe import one_line

from .sparesync import attempt_nodes, sync_quarantines

# the chain's end for its last attempt when that one ended by itself first (a user's kill
# in the backoff leaves the attempt its failure: the chain's KILLED is for one it ended)
FINAL = {ChainStatus.GAVE_UP: RunStatus.GAVE_UP}
# the chain's end for its last attempt when that one has no end of its own
NO_END = {ChainStatus.KILLED: RunStatus.KILLED, ChainStatus.FAILED_RESTART: RunStatus.ABORTED}


def entries(chain: dict[str, Any]) -> list[dict[str, Any]]:
    """chain.json's attempts that have the shape of ours (a number and a run)."""
    items = chain.get("attempts")
    out = []
    for e in items if isinstance(items, list) else []:
        if isinstance(e, dict) and type(e.get("attempt")) is int and isinstance(e.get("run"), str):
            out.append(e)
    return out


def sync_chain(record: RunRecord, view: BoardView | None) -> RunRecord:
    """The chain's latest record after writing what the coordinator did (`record`
    itself when the board has no chain this machine launched)."""
    chain = view.chain if view is not None else None
    first_id = str(chain.get("chain")) if chain else None
    # the chain's first record: the caller's when it is that one (a 128-node record
    # read again cost a cold `status` ~3 ms of a loaded machine)
    first = (
        record
        if first_id == record.run_id
        else load_run(record.job, first_id)
        if first_id
        else None
    )
    if chain is None or first is None or first.watch_port is None:
        return record
    status = status_of(chain.get("status"))
    sync_quarantines(first, chain)
    attempts = entries(chain)
    ends: list[dict[str, Any]] = []
    latest = first
    for i, e in enumerate(attempts):
        if _after_kill(latest, e) and first.attempt + e["attempt"] > latest.attempt:
            break  # the user's kill ended the chain here: no attempt of it is live after
        rec = _record_of(first, e, ends)
        if rec is None:
            continue
        last = i == len(attempts) - 1
        _move(rec, e, status if last else None, restarted=not last)
        plain = coordinator_clock(
            e.get("steps") or (_status_steps(view, e["run"]) if last else None)
        )
        # an attempt is over when it has an end, or when it is the last of a chain that
        # ended (a user's kill ends the chain without the attempt's own end)
        over = isinstance(e.get("end"), dict) or (last and status is not None and not status.live)
        if plain is not None and _steps_due(rec, plain, final=over or not rec.status.is_live):
            rec.update(partial(note_plain, plain=plain))
        if isinstance(e.get("end"), dict):
            ends.append(e["end"])
        latest = rec
    return latest


def _record_of(first: RunRecord, e: dict[str, Any], ends: list[dict[str, Any]]) -> RunRecord | None:
    k, run = e["attempt"], e["run"]
    if k == 0:
        return first if run == first.run_id else None
    if not RUN_ID.fullmatch(run) or run == first.run_id:  # named by the coordinator
        return None
    found = load_run(first.job, run)
    if found is not None:  # written at an earlier look; another chain's is never taken
        return found if found.chain == (first.chain or first.run_id) else None
    started = e.get("started_at")
    nodes = [
        replace(n, tag=n.tag.replace(f"/{first.run_id}/", f"/{run}/"),
                run_dir=n.run_dir.replace(f"/{first.run_id}/", f"/{run}/"),
                started_at=started if isinstance(started, (int, float)) else None)
        for n in attempt_nodes(first, e.get("nodes"))
    ]  # fmt: skip
    swap = [h for h in first.history if h.get("what") == SWAP_NOTE]  # a main put in from here
    rec = RunRecord(
        first.job, run, first.config, first.master_addr, first.master_port, nodes,
        status=RunStatus.RUNNING, chain=first.chain or first.run_id, attempt=first.attempt + k,
        attempts=[*first.attempts, *ends], watch_port=first.watch_port, history=list(swap),
    )  # fmt: skip
    if isinstance(started, (int, float)):
        rec.created_at = rec.finished_launch_at = float(started)
    rec.note("started", by="coordinator")
    if not rec.create_once():  # another look wrote it meanwhile: that one is the record
        return load_run(first.job, run)
    return rec


def _stopped(r: RunRecord) -> bool:
    return r.stopped_by_user or r.status in (RunStatus.KILLED, RunStatus.KILLING)


def _after_kill(r: RunRecord, e: dict[str, Any]) -> bool:
    """Whether attempt `e` comes after the user's kill of `r`: an attempt the coordinator
    had started before it (this machine asleep through a restart, the kill marked the
    attempt it knew) ran until that kill and is recorded, killed, with its training."""
    if not _stopped(r):
        return False
    killed = next((h.get("at") for h in reversed(r.history) if h.get("what") == "kill"), None)
    started = e.get("started_at")
    if not isinstance(killed, (int, float)) or not isinstance(started, (int, float)):
        return True
    return started >= killed


def _overtaken(r: RunRecord, e: dict[str, Any]) -> bool:
    """A user's kill marked `r` after its attempt had already ended on the cluster (this
    machine had not seen the end, nor the restart after it): the chain's end stands,
    and the kill was the later attempt's, which the chain records killed."""
    if not _stopped(r):
        return False
    note = next((h.get("at") for h in reversed(r.history) if h.get("what") == "kill"), None)
    # a teardown the coordinator decided before the kill is its end, however long the
    # kill of it took (the user's kill came while it ran)
    killed, ended = _when(note), _when(e.get("decided_at")) or _when(e.get("ended_at"))
    return killed is not None and ended is not None and killed > ended


def _when(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _move(
    rec: RunRecord, e: dict[str, Any], chain_status: ChainStatus | None, restarted: bool = False
) -> None:
    """An attempt's end, as the chain says it (`chain_status`: the chain's, for its last
    attempt; `restarted`: an attempt a later one followed); a record already ended keeps
    its end."""
    end = e.get("end")
    if not isinstance(end, dict):
        if (
            chain_status is not None and chain_status in NO_END
        ):  # the chain ended on this attempt before it ran or ended
            _mark(rec, NO_END[chain_status], None, one_line(str(e.get("why") or ""))[:200])
        return
    cause = one_line(str(end.get("cause") or ""))[:300] or None
    ended = chain_status is not None and not chain_status.live  # no restart will come
    if restarted or (e.get("delay") is not None and not ended):
        status = RunStatus.RESTARTING
    elif chain_status is not None and chain_status in FINAL:
        status = FINAL[chain_status]
    elif end.get("state") == "finished":
        status = RunStatus.FINISHED
    else:
        status = RunStatus.TORN_DOWN if _torn_down(e, end) else RunStatus.FAILED
    if not (rec.status.is_live or _overtaken(rec, e)) or rec.status is status:
        return  # as the chain says already: no rewrite of the record on each look

    def change(r: RunRecord) -> None:
        if not (r.status.is_live or _overtaken(r, e)) or r.status is status:
            return
        r.status = status
        r.cause = cause if status is not RunStatus.FINISHED else r.cause
        if e.get("kind") == OutcomeKind.TEARDOWN and isinstance(end.get("culprit"), str):
            at = _when(e.get("ended_at"))
            first = firstfail.read(e.get("first"))  # when it broke: the ledger's detection
            fault = first.at if first is not None and first.at is not None else at
            state = str(end.get("state"))
            r.note("watchdog-teardown", by="coordinator", node=end["culprit"], state=state,
                   why=cause or "", decided_at=at, killed_at=at, at=at or time.time(),
                   fault_at=fault)  # fmt: skip
        r.note(status.value, by="coordinator", why=one_line(str(e.get("restart") or ""))[:200])

    rec.update(change)


STEPS_EVERY = REFRESH  # seconds a live attempt's note may lag (stepclock.py's cadence)


def _steps_due(rec: RunRecord, plain: dict[str, Any], final: bool) -> bool:
    """Whether the note must be written now. Why not on every look: it is a locked,
    fsynced rewrite of the whole record (~10 ms for 128 nodes, on every cold `status`)
    for a step count the board shows anyway (a look shows the fresh one: fresh_steps).
    An ended attempt's, any change but the last step's, and a last step STEPS_EVERY
    later are written: the ledger of a live attempt lags by at most that much, an ended
    one's is exact."""
    old = next((h for h in rec.history if h.get("what") == "steps"), None)
    if old is None:
        return True
    kept = {k: v for k, v in old.items() if k in CLOCK_KEYS}
    if kept == plain:
        return False
    moving = ("last_step", "last_step_at")
    if final or any(kept.get(k) != plain.get(k) for k in CLOCK_KEYS.difference(moving)):
        return True
    then, now = kept.get("last_step_at"), plain.get("last_step_at")
    if not isinstance(then, (int, float)) or not isinstance(now, (int, float)):
        return True
    return now - then >= STEPS_EVERY


def fresh_steps(record: RunRecord, view: BoardView | None) -> dict[str, dict[str, Any]]:
    """The clock of the chain's latest attempt as this look read it, for the ledger's
    line of this look (history.chain_line's `steps`): the record on disk may lag by up
    to STEPS_EVERY. From the board, never put into the record unsaved: _steps_due
    compares with what was written (a `status --watch` holding one record object would
    otherwise never write it)."""
    chain = view.chain if view is not None else None
    attempts = entries(chain) if chain else []
    if view is None or not attempts or attempts[-1]["run"] != record.run_id:
        return {}
    plain = coordinator_clock(attempts[-1].get("steps") or _status_steps(view, record.run_id))
    return {record.run_id: plain} if plain is not None else {}


def _status_steps(view: BoardView | None, run: str) -> object:
    """status.json's clock when it is `run`'s: a restart puts the new attempt into
    chain.json before status.json is next written, and that one still carries the last
    attempt's clock (the ledger would count its training twice)."""
    status = view.status if view is not None else None
    return status.get("steps") if status is not None and status.get("run") == run else None


def _torn_down(e: dict[str, Any], end: dict[str, Any]) -> bool:
    """The coordinator decided the attempt's end (a teardown); one that failed by itself
    (`on_failure: notify`, or every node gone at once) has a culprit too, its first
    failure, and is `failed`. A chain.json without `kind` (before issue 37): its culprit."""
    kind = e.get("kind")
    return kind == OutcomeKind.TEARDOWN if kind is not None else bool(end.get("culprit"))


def _mark(rec: RunRecord, status: RunStatus, cause: str | None, why: str) -> None:
    if not rec.status.is_live or rec.status is status:
        return  # marked already: no rewrite of the record on each look

    def change(r: RunRecord) -> None:
        if r.status.is_live and r.status is not status:
            r.status, r.cause = status, cause or r.cause
            r.note(status.value, by="coordinator", why=why)

    rec.update(change)
