"""What the cluster's watch did, as this machine learns it on its next contact.

Why: with `watch.where: cluster` nothing on this machine watches the run; the
coordinator on the main node decides and writes its board there. `status` reads that
board over the connection it already has to the main, says who watches and whether
they are there, and, when the coordinator tore the job down or saw it end, writes that
into the local run record once (so `history`, `report` and the next `launch` see the
run ended, and why), never overwriting an ending the record already has.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mntui.sessions.launch.board import BoardView
from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.rules.chainstates import LIVE
from mntui.sessions.node.rules.restarts import attempt_label
from mntui.sessions.report import load_finding
from mntui.sessions.runs import MISSED_NOTE, RunRecord
from mntui.sessions.termsafe import one_line

from .reading import coordinator


def _hms(t: object) -> str:
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return time.strftime("%H:%M:%S", time.localtime(t))
    return "?"


def _text(v: object, limit: int = 200) -> str:
    return one_line(str(v))[:limit] if v is not None else "?"


def watch_line(record: RunRecord, view: BoardView | None) -> str:
    """Who watches this run, and whether they are there."""
    where = coordinator(record) or "?"
    if view is None:  # nothing here replaces a lost main: its workers end the job
        return (
            f"watch: the cluster (coordinator on {where}); the main did not answer: if it "
            "stays lost, its sentinels tear the job down; `mntui kill` stops what is left"
        )
    nodes = (view.status or {}).get("nodes")
    total = len(nodes) if isinstance(nodes, dict) else len(record.nodes)
    if view.alive and not view.fresh and not coordinator_done(view):
        at = (view.status or {}).get("at")
        quiet = f" for {view.now - at:.0f} s" if isinstance(at, (int, float)) and view.now else ""
        return (
            f"watch: the coordinator on {where} is there but has written nothing{quiet} "
            "(stopped?): its sentinels tear their nodes down if it stays silent"
        )
    if view.alive and not coordinator_done(view):
        return (
            f"watch: the cluster: coordinator on {where}, {view.connected()} of {total} "
            "sentinel(s) connected; this machine may sleep"
        )
    if coordinator_done(view):
        return f"watch: the cluster's coordinator on {where} has ended (its decision below)"
    return (
        f"watch: NONE: the coordinator on {where} is gone and decided nothing; "
        "`mntui kill` stops the job"
    )


def coordinator_done(view: BoardView) -> bool:
    """The coordinator has ended its chain (or is ending it: its last decision made);
    between two attempts of a chain it has not."""
    chain = view.chain
    if chain is not None:
        return chain.get("status") not in LIVE
    return view.decision is not None


def _label(k: object) -> str:
    return attempt_label(k) if type(k) is int and 0 <= k < 1 << 20 else "attempt ?"


def chain_lines(view: BoardView | None) -> list[str]:
    """The attempts the coordinator ended and what the restart policy said of each."""
    items = (view.chain or {}).get("attempts") if view is not None else None
    out = []
    for e in items if isinstance(items, list) else []:
        end = e.get("end") if isinstance(e, dict) else None
        if not isinstance(end, dict):
            continue
        then = f", then {_text(e.get('restart'), 240)}" if e.get("restart") else ""
        delay = e.get("delay")
        after = f" after {delay:g} s" if isinstance(delay, (int, float)) and then else ""
        swapped = e.get("swapped")  # a spare swapped in for the next attempt (node/chain/swaps.py)
        swapped = swapped[:4] if isinstance(swapped, list) else []
        moved = "".join(f"; {_text(x, 120)}" for x in swapped)
        out.append(
            f"{_label(e.get('attempt'))} ({_text(e.get('run'), 40)}) ended at "
            f"{_hms(e.get('ended_at'))}: {_text(end.get('cause'))}{then}{after}{moved}"
        )
    return out


def decision_lines(view: BoardView | None, run: str | None = None) -> list[str]:
    """The coordinator's latest decision, when it is about `run` (None: any)."""
    d = view.decision if view is not None else None
    if not d or (run is not None and d.get("run") != run):
        return []
    first = blamed(d)
    if "ended" in d:
        head = f"the coordinator saw the job end at {_hms(d.get('ended_at'))}"
        return [f"{head}: {first}" if first else head]
    if d.get("decided_by") == "user":
        lines = [f"the user's kill went through the coordinator at {_hms(d.get('decided_at'))}:"]
    elif d.get("node") is None:  # a stop of its own (an attempt that did not start)
        lines = [f"the coordinator stopped the job at {_hms(d.get('decided_at'))}: "
                 f"{_text(d.get('why'))}"]  # fmt: skip
    else:
        seen = f"{_text(d.get('node'))} {_text(d.get('state'))}: {_text(d.get('why'))}"
        lines = [f"the coordinator tore the job down at {_hms(d.get('decided_at'))}: "
                 f"{first or seen}"]  # fmt: skip
    # the sentinels' stacks module runs on the nodes: loaded only for a decision to show
    from mntui.sessions.node.sentinel.stackcap import status_line as stacks_line

    kills = d.get("kill")
    if isinstance(kills, dict):
        for node, res in sorted(kills.items()):
            lines.append(f"  {_text(node, 64)}: {_kill_text(res)}")
    if taken := stacks_line(kills):  # the sentinels' stacks before the kill
        lines.append(f"  {taken}")
    return lines


def blamed(d: dict[str, Any]) -> str | None:
    """A decision's first failure (node/rules/firstfail.py) in words: `node1 rank 1 failed
    first: ...`, the judge's own state for its own node (a freeze); None when it named
    none (a user's kill, an attempt that ended clean)."""
    first = firstfail.read(d.get("first"))
    if first is None:
        return None
    state = d.get("state") if d.get("node") == first.node else None
    verb = _text(state, 20) if isinstance(state, str) else "failed"
    return one_line(f"{first.who} {verb} first: {first.why}", 300)


def missed_lines(record: RunRecord) -> list[str]:
    """What the user's kill found from here on a node whose sentinel had reported it
    clean (launch/userkill.py's sweep): the coordinator's account above is then wrong."""
    out = []
    for h in record.history:
        nodes = h.get("nodes") if h.get("what") == MISSED_NOTE else None
        for node, pids in sorted(nodes.items()) if isinstance(nodes, dict) else ():
            pids = [p for p in pids if type(p) is int] if isinstance(pids, list) else []
            out.append(
                f"  {_text(node, 64)}'s sentinel reported it clean, yet the kill's sweep from "
                f"this machine found {len(pids)} process(es) of the job there "
                f"({' '.join(map(str, pids[:8]))}) and stopped them"
            )
    return out


def _kill_text(res: Any) -> str:
    if not isinstance(res, dict):
        return "?"
    if "error" in res:
        return _text(res["error"])
    found = res.get("found")
    n = len(found) if isinstance(found, list) else 0
    left = res.get("left")
    tail = f", STILL ALIVE: {_text(left)}" if left else ""
    return f"{n} process(es) stopped{tail}"


CONTACT = "contact.json"  # in the run's local dir: when this machine last looked, and the step
EVENTS = {"decision", "kill", "ended", "refused", "disconnected", "straggler", "slow", "respawn",
          "respawn-gave-up", "notified", "notify-command"}  # fmt: skip


def _step_now(view: BoardView) -> int | None:
    nodes = (view.status or {}).get("nodes")
    steps: list[int] = []
    for v in nodes.values() if isinstance(nodes, dict) else []:
        step = v.get("step") if isinstance(v, dict) else None
        if type(step) is int:
            steps.append(step)
    return max(steps) if steps else None


def _contact(record: RunRecord) -> Path:
    """One file for the whole chain: a restart on the cluster is no new look."""
    return record.dir.parent / (record.chain or record.run_id) / CONTACT


def _last_contact(record: RunRecord) -> tuple[float | None, int | None]:
    try:
        data = json.loads(_contact(record).read_text())
    except (OSError, ValueError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    at, step = data.get("at"), data.get("step")
    at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None
    return at, step if type(step) is int else None


def away_lines(record: RunRecord, view: BoardView | None, now: float | None = None) -> list[str]:
    """What happened since this machine last looked at the run (its previous `status`),
    from the coordinator's journal; then notes this look as the last contact."""
    if view is None or view.status is None:
        return []
    now = (view.now or time.time()) if now is None else now  # the journal's clock: the main's
    since, step_then = _last_contact(record)
    step = _step_now(view)
    try:
        _contact(record).write_text(json.dumps({"at": now, "step": step}))
    except OSError:
        pass
    if since is None:
        return []
    after = view.journal_since(since)
    events = [j for j in after if j.get("kind") in EVENTS]
    steps = [j for j in after if j.get("kind") == "steps"]
    # a teardown since then: the job did not "run on", whatever its step did (issue 38)
    torn = any(e.get("kind") == "decision" for e in events)
    head = f"since this machine last looked ({_hms(since)}, {now - since:.0f} s ago): "
    lines = []
    if step_then is not None and step is not None and step > step_then:
        went = f"steps {step_then} → {step}"
        if coordinator_done(view):
            said = f"the job went {went}, then ended"
        elif torn:
            said = f"the job went {went}, torn down on the way"
        else:
            said = f"the job ran on, {went}"
        lines.append(head + said)
    elif steps or step is not None:
        lines.append(head + f"the job's step is {step if step is not None else '?'}")
    else:
        lines.append(head + "no step seen")
    lines += [f"  {_hms(e['t'])} {_event(e)}" for e in _kept(events, AWAY_EVENTS)]
    return lines


AWAY_EVENTS = 8  # lines of what happened while away, every teardown among them


def _kept(events: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """The latest `most` events, every decision kept whatever came after it (a gave-up
    chain's freeze teardown was pushed out by the disconnects that followed it)."""
    decisions = [i for i, e in enumerate(events) if e.get("kind") == "decision"][-most:]
    others = [i for i, e in enumerate(events) if e.get("kind") != "decision"]
    room = max(0, most - len(decisions))
    keep = set(decisions) | set(others[len(others) - room :] if room else [])
    return [e for i, e in enumerate(events) if i in keep]


def _event(e: dict[str, Any]) -> str:
    """One journal line for people: what the coordinator saw or did."""
    kind, node = e.get("kind"), _text(e.get("node"), 64)
    data = e.get("data")
    data = data if isinstance(data, dict) else {}
    if kind == "decision":
        return f"{node} {_text(data.get('state'), 20)}: {_text(data.get('why'))}: torn down"
    if kind == "kill":
        return "the user's kill"
    if kind == "ended":
        return "the job ended on every node"
    if kind == "straggler":  # node/coord/slowness.py: a rank named, once
        action = _text(data.get("action"), 20)
        return f"straggler: {_text(data.get('line'))} (on_slow: {action})"
    if kind == "slow":
        return _text(data.get("line"))
    if kind == "respawn":  # node/proc/respawn.py: each node's two watchers keep each other up
        return f"{node}'s {_text(data.get('who'), 20)} died and was started again"
    if kind == "respawn-gave-up":
        return f"{node}'s {_text(data.get('who'), 20)} stays down: {_text(data.get('why'))}"
    if kind == "notified":  # node/notice/notifysend.py: the webhook's fate, posted from the main
        state, why, event = _text(data.get("webhook"), 20), data.get("why"), data.get("event")
        of = f" of the {_text(event, 20)} event" if isinstance(event, str) and event else ""
        return f"the webhook notification{of}: {state}" + (f" ({_text(why, 120)})" if why else "")
    if kind == "notify-command":  # node/notice/notifysend.py: the user's command, run on the main
        why = data.get("why")
        return f"the notify command on the main: {_text(why, 120) if why else 'exited 0'}"
    if kind == "refused":
        reason, peer = _text(data.get("reason"), 40), _text(data.get("peer"), 64)
        return f"refused a connection ({reason}, from {peer})"
    return f"{node}'s sentinel disconnected: {_text(data.get('why'), 120)}"


def straggler_lines(record: RunRecord) -> list[str]:
    """`status`'s straggler line, the here-watched run's (`straggler: rank 1 (node1)
    waits ...`), from the finding adopted above."""
    found = load_finding(record.dir)
    return found.lines if found is not None else []


def straggler_json(record: RunRecord) -> dict[str, Any] | None:
    """The finding as `status --json` gives a here-watched run's (`straggler`)."""
    found = load_finding(record.dir)
    return None if found is None else {**asdict(found), "lines": found.lines}
