"""The coordinator's teardown: every sentinel kills its node's part at once.

Why in parallel and from the nodes: a kill that goes node by node over SSH from the
manager costs seconds at 64 nodes and nothing at all while the manager is away; each
sentinel kills by tag on its own node and reports what it found. A node whose sentinel
does not answer is said (`its ranks may still run`), never taken for clean; the main's
ranks the coordinator kills itself when the main's sentinel cannot, since it runs there.

For a hang the kill carries "stacks first": each sentinel takes its ranks' stacks for
its own node (all nodes at once) within the budget, saves them, then kills, as the
manager's teardown does (watch/takedown.py); an unreachable culprit is not asked for
stacks. The main's ranks that the coordinator kills itself get none: that sentinel is
gone, and with it the capture script's runner.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from typing import Any

from mntui.sessions.node.proc import killer, members
from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.rules.firstfail import NodeCause
from mntui.sessions.node.rules.judging import NodeTrigger
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.rules.termsafe import one_line
from mntui.sessions.node.wire.watchcfg import WatchConfig

from .coordpeers import PULSE
from .coordstate import Board

ANSWER_SLACK = 8.0  # seconds past the grace for a sentinel's report (port wait: 3 s)
# States in which the other ranks are most likely blocked in a collective: worth a stack
# (the manager's teardown and report use this set too: report/postmortem.py).
HUNG = frozenset({NodeState.FROZEN, NodeState.STALLED, NodeState.UNREACHABLE})
# A freeze's stacks wait no longer than this: py-spy of a stopped rank (--nonblocking) and
# of the others takes 0.1-0.3 s a node (tests/integration/test_cluster_stacks.py), and the
# Flight Recorder ask of NCCL ranks before it is bounded by 1 s (stackscript.ask_snippet);
# the wait for their dumps after the stacks is what this cuts.
FROZEN_BUDGET = 1.5


def teardown(
    board: Board, t: NodeTrigger, cfg: WatchConfig, codes: tuple[int, ...] = ()
) -> tuple[str, NodeCause | None]:
    """`codes`: the nodes' exit codes at the decision, kept in the record for the restart
    policy of a coordinator that takes the chain over before it decided (resume.py).
    Returns what is said of it and the first failure, named once every node's ranks are
    gone (firstfail.py): the node the judge decided on is only the first it saw."""
    decided_at = board.decided_at = time.time()
    why = f"{t.node} {t.state}: {t.why}"
    board.journal_steps(decided_at, force=True)  # where each rank stood: the report's
    board.journal("decision", t.node, state=str(t.state), why=t.why)
    record: dict[str, Any] = {
        "run": board.run,
        "decided_by": "coordinator",
        "node": t.node,
        "state": str(t.state),
        "why": t.why,
        "decided_at": decided_at,
        "exit_codes": list(codes),
        "kill": {},
    }
    board.write("decision.json", record)
    record["kill"] = kill_everywhere(board, cfg, why, stacks=stacks_first(t, cfg, decided_at))
    record["ended_at"] = time.time()
    first = blame(board, record["kill"], t)
    if first is not None:
        record["first"] = board.first = firstfail.plain(first)
        why = f"{first.who} {_verb(first, t)}: {first.why}"
        board.publish(board.verdicts, time.monotonic(), force=True)  # the app's header says it
    board.write("decision.json", record)
    board.journal("teardown", None, nodes=sorted(record["kill"]), first=record.get("first"))
    board.keep_decision(record)
    return f"torn down: {why}", first


def blame(board: Board, kill: dict[str, Any], t: NodeTrigger | None) -> NodeCause | None:
    """The first failure of the attempt from the kill's reports (each node's `cause`)
    and the judge's own clock (`problem_at`); for a hang, the node the judge decided on
    (a frozen or silent node's log says nothing of it; the others' errors follow it)."""
    causes = []
    for rank, node in enumerate(board.layout):
        res = kill.get(node)
        said = res.get("cause") if isinstance(res, dict) else None
        seen = board.problem_at.get(node)
        c = firstfail.from_wire(node, rank, said, seen) if said is not None else None
        if c is None:
            if said is not None:
                with board.lock:
                    board.malformed += 1
            c = firstfail.NodeCause(node, rank, seen, None, None, None, None)
        causes.append(c)
    if t is not None and t.state in HUNG:
        hung = next((c for c in causes if c.node == t.node), None)
        why = one_line(t.why, firstfail.MAX_TEXT)
        return replace(hung, rank=None, cause=None, summary=why, secondary=False) if hung else None
    first = firstfail.first_failure(causes, t.node if t is not None else None)
    if first is None or t is None or first.node != t.node or first.summary or first.exit_code:
        return first
    # nothing in its log nor an exit: what the judge saw is the why (a straggler named
    # by the wait samples, a node the rule found slow), not "no error in its log"
    return replace(first, summary=one_line(t.why, firstfail.MAX_TEXT))


def _verb(first: NodeCause, t: NodeTrigger) -> str:
    """The state the judge saw, for its own node; another node named first failed."""
    return str(t.state) if first.node == t.node else str(NodeState.FAILED)


def finish(board: Board, cfg: WatchConfig, record: dict[str, Any]) -> None:
    """A teardown a coordinator decided and died in (decision.json has no `ended_at`),
    finished by the one started after it: the same decision, its kill done again on
    every node (what was killed is gone; the rest is found by tag), no stacks (the
    moment they were for has passed)."""
    why = f"{record.get('node')} {record.get('state')}: {record.get('why')}"
    board.journal("teardown-resumed", None, why=why[:200])
    record["kill"] = kill_everywhere(board, cfg, why)
    record["ended_at"] = time.time()
    board.write("decision.json", record)
    board.journal("teardown", None, nodes=sorted(record["kill"]))
    board.keep_decision(record)


def user_kill(board: Board, cfg: WatchConfig, grace: float, request: str | None = None) -> str:
    """The user's `mntui kill`, asked through the request file: one request, every
    sentinel kills its node at once and reports; the record says the user did it, and
    carries the request's id (the manager takes only the answer to its own question)."""
    why = "the user's kill"
    board.journal("kill", None, by="user", grace=grace)
    stop(board, cfg, {"decided_by": "user", "why": why, "request": request}, grace)
    return "killed by the user"


def stop(board: Board, cfg: WatchConfig, head: dict[str, Any], grace: float) -> None:
    """A kill of everything of the current attempt, recorded as `head` says who and why."""
    record: dict[str, Any] = {"run": board.run, **head, "decided_at": time.time(), "kill": {}}
    board.write("decision.json", record)
    record["kill"] = kill_everywhere(board, cfg, str(head.get("why")), grace)
    record["ended_at"] = time.time()
    record["steps"] = dict(board.clock)  # the attempt's last steps: the ledger's, exact
    board.write("decision.json", record)
    if isinstance(head.get("request"), str):  # the user's `mntui kill` waits on this
        board.answered(head["request"])
    board.keep_decision(record)  # the attempt's copy: nobody waits on it


def stacks_first(t: NodeTrigger, cfg: WatchConfig, decided_at: float) -> dict[str, Any] | None:
    """The kill's "stacks first" for a hang (None: no stacks): the decision, saved with
    the stacks for the report to name, and the budget."""
    if t.state not in HUNG or cfg.capture_budget <= 0 or cfg.stacks_nonce is None:
        return None
    budget = cfg.capture_budget
    if t.state is NodeState.FROZEN:
        budget = min(budget, FROZEN_BUDGET)
    return {"node": t.node, "state": str(t.state), "why": t.why, "at": decided_at,
            "budget": budget}  # fmt: skip


def kill_everywhere(
    board: Board,
    cfg: WatchConfig,
    why: str,
    grace: float | None = None,
    stacks: dict[str, Any] | None = None,
) -> dict[str, Any]:
    grace = cfg.grace if grace is None else grace
    peers = board.live_peers()
    asked: dict[str, str] = {}
    for n in peers:
        extra = {"stacks": stacks} if stacks is not None and _can_give(n, stacks) else {}
        rid = board.ask(n, "kill", grace=grace, why=why, **extra)
        if rid is not None:
            asked[n] = rid
    results: dict[str, Any] = {}
    local: threading.Thread | None = None
    if cfg.node not in asked:  # the main's sentinel is gone: its ranks are ours to kill
        entry = f"MNTUI_RUN={cfg.job}/{board.run}/{cfg.node}"  # the current attempt's tag
        args = (entry, cfg, grace, results)
        local = threading.Thread(target=_kill_here, args=args, daemon=True)
        local.start()
    slack = ANSWER_SLACK + 0.05 * len(cfg.nodes)  # a busy main reads N reports in turn
    if stacks is not None:
        slack += float(stacks["budget"])
    deadline = time.monotonic() + grace + slack
    for node, rid in asked.items():
        msg = board.wait_reply(node, rid, deadline)
        if msg is None:
            results[node] = {"error": "its sentinel did not report the kill: ranks may still run"}
            continue
        res = msg.get("result")
        results[node] = res if isinstance(res, dict) else {"error": "a malformed kill report"}
    end = time.monotonic() + grace + slack
    while local is not None and local.is_alive() and time.monotonic() < end:
        board.pulse()
        local.join(PULSE)
    for node in board.layout:
        results.setdefault(node, {"error": "no sentinel connected: its ranks may still run"})
    return results


def _can_give(node: str, stacks: dict[str, Any]) -> bool:
    """An unreachable culprit is not asked for stacks (the manager's path skips it too):
    its answer, if any, must not wait for a capture."""
    return not (stacks["node"] == node and stacks["state"] == str(NodeState.UNREACHABLE))


def _kill_here(entry: str, cfg: WatchConfig, grace: float, results: dict[str, Any]) -> None:
    """By the one rule, the sentinel's `members` file in the attempt's run dir included."""
    tag = entry.partition("=")[2]
    run_dir = members.run_dir(*tag.split("/"))
    target = killer.Target(re.escape(entry), session=cfg.session, ports=cfg.ports, runs=(run_dir,))
    res = killer.kill(target, grace=grace)
    results[cfg.node] = dict(res.as_dict(), by="coordinator")
