"""The chaos campaign's faults of issue 39 on the watch on the cluster, profile `cluster`:
a peer that never knows the secret floods the coordinator's port, and a main frozen past
unreachable_after wakes.

- `unauth-flood`: tests/portflood.py holds idle connections to the coordinator's port
  (the moment: 40, the review's, or 200, past the door's bound of one address),
  reopening each as it is dropped, for the whole fault. Under it the coordinator is
  SIGKILLed (by its
  pid file): the main's sentinel starts it again within RESPAWN s, every sentinel is
  connected to the new one (`reconnect`: seconds from the kill), past 2 x
  unreachable_after nothing was decided, no sentinel lost it, every node trained on.
  Then a rank of the picked node is SIGKILLed: the coordinator tears the job down naming
  that node (`decision`: seconds from the kill), and its board counted the flood as
  refused, never served. Then the user's kill leaves nothing.
- `main-wake`: the main's job side (coordinator, sentinel, ranks; not its sshd)
  SIGSTOPped with `restart: {max: 2}`; the worker's sentinel tears its node down and
  leaves (lost.json); SIGCONT. The woken coordinator must start nothing on the main (no
  second attempt in chain.json, no rank of another run on the main, ever), name the main
  (unreachable: its own stop) in its decision (`decision`: seconds from the SIGCONT),
  end the chain for this machine to replace its main, and a fresh `mntui status` says
  torn-down naming the main. Then the user's kill leaves nothing.

Both end as every cluster fault does (chaos_cluster.the_end: nothing tagged with the
job on any node, no session, both ports free, every run record ended).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

from chaos_checks import (
    Violation,
    check_decision,
    check_no_decision,
    check_not_lost,
    check_respawned,
    check_status_torn_down,
    check_steps_advanced,
)
from chaos_cluster import (
    DOWN,
    RESPAWN,
    STEPS,
    UNREACHABLE,
    _json,
    _pid_of,
    _said,
    _status_words,
    a_rank,
    cont,
    decision,
    finished,
    lost,
    node_side,
    run_dir,
    status,
    steps,
    stop,
    the_end,
    watch_port,
)
from chaos_fault import Fault, HarnessError, signal_each
from chaos_job import Profile, until
from fakecluster import cmdline, environ_of
from portflood import flooding

from mntui.sessions.runs import RunRecord

# the flood's size, as the fault's moment: the review's, and one past the door's bound of
# one address (64 connections without their hello)
MOMENTS = {"unauth-flood": ("hold-40", "hold-200")}
RESTARTS = {"main-wake": "max: 2, backoff: 1"}  # the cluster profile's restart, per kind
PROFILES = dict.fromkeys(("unauth-flood", "main-wake"), (Profile.CLUSTER,))


def _board(f: Fault, rec: RunRecord) -> dict[str, Any]:
    return _json(run_dir(f, rec, rec.nodes[0].node) / "coord" / "status.json") or {}


def _all_connected(f: Fault, rec: RunRecord, coordinator: int) -> bool:
    b = _board(f, rec)
    nodes = b.get("nodes") if isinstance(b.get("nodes"), dict) else {}
    return b.get("pid") == coordinator and all(
        isinstance(nodes.get(n.node), dict) and nodes[n.node].get("connected") for n in rec.nodes
    )


def unauth_flood(f: Fault) -> None:
    rec, node = f.target()
    main = rec.nodes[0].node
    hold = int(f.plan.moment.removeprefix("hold-") or 40)
    with flooding(watch_port(f), hold=hold) as said:
        until(lambda: False, f.plan.delay, f.dl, 0.1)  # `delay` s into the flood
        old = _pid_of(f, rec, "coord", main)
        if old is None:
            raise HarnessError(f"no coordinator on {main} named by its pid file")
        before, t0 = steps(f, rec), time.time()
        signal_each([old], signal.SIGKILL)
        new = until(lambda: (p := _pid_of(f, rec, "coord", main)) not in (None, old) and p,
                    RESPAWN, f.dl, 0.05)  # fmt: skip
        took = round(time.time() - t0, 2) if new else None
        back = until(lambda: bool(new) and _all_connected(f, rec, new), 30, f.dl, 0.05)
        if back:
            f.out.times["reconnect"] = round(time.time() - t0, 2)
        until(lambda: False, max(0.0, t0 + 2 * UNREACHABLE - time.time()), f.dl, 0.5)
        after = steps(f, rec)
        gone = {n.node: lost(f, rec, n.node) for n in rec.nodes}
        what = f"a coordinator SIGKILL under a flood of {hold}"
        found = check_respawned("coordinator", old, new or None, took, RESPAWN)
        if not back:
            found.append(Violation("reconnect", None, f"not every sentinel reached the new "
                                   f"coordinator within 30 s under a flood of {hold}"))  # fmt: skip
        found += check_no_decision(decision(f, rec), what) + check_not_lost(gone, what)
        found += check_steps_advanced(before, after, STEPS)
        f.bad(found, "after the respawn under the flood")
        rank, t1 = a_rank(f, rec, node), time.time()
        signal_each([rank], signal.SIGKILL)
        d = until(lambda: finished(f, rec), DOWN, f.dl, 0.1)
        if d and isinstance(d.get("decided_at"), (int, float)):
            f.out.times["decision"] = round(d["decided_at"] - t1, 2)
    refused = _board(f, rec).get("refused")
    counted = sum(v for v in refused.values() if type(v) is int) if isinstance(refused, dict) else 0
    f.say(f"{said[0] if said else 'flood: no word'}; coordinator {old} -> {new or 'NOT'} in "
          f"{took}s, every sentinel back {f.out.times.get('reconnect', 'NOT')}s; SIGKILL rank "
          f"{rank} on {node}: {_said(d)}; {counted} refused on the board")  # fmt: skip
    f.bad(check_decision(d, node, ("failed", "orphaned")), "the decision under the flood")
    if counted < hold:
        f.bad([Violation("refused", None, f"{counted} connections counted refused, fewer than "
                         f"the flood's {hold}")], "the board")  # fmt: skip
    the_end(f)


def _runs_on(job: str, node: str) -> set[str]:
    """The run ids of the job's live processes on `node`, by their tag."""
    out = set()
    for pid in node_side(job, node):
        for e in environ_of(pid):
            if e.startswith(b"MNTUI_RUN=") and cmdline(pid):
                out.add(e.decode(errors="replace").split("/")[1])
    return out


def main_wake(f: Fault) -> None:
    rec, _ = f.target()
    main, worker = rec.nodes[0].node, rec.nodes[-1].node
    held = stop(f, node_side(f.job.job, main))
    f.say(f"SIGSTOP the main's job side ({len(held)}: coordinator, sentinel, ranks)")
    info = until(lambda: lost(f, rec, worker), DOWN, f.dl, 0.2)
    until(lambda: not node_side(f.job.job, worker), 30, f.dl, 0.2)  # its sentinel left too
    t0 = time.time()
    cont(f, held)
    started: set[str] = set()

    def decided() -> dict[str, Any] | None:
        started.update(_runs_on(f.job.job, main) - {rec.run_id})
        return finished(f, rec)

    d = until(decided, DOWN, f.dl, 0.1)
    if d and isinstance(d.get("decided_at"), (int, float)):
        f.out.times["decision"] = round(d["decided_at"] - t0, 2)
    until(lambda: decided() is not None and not node_side(f.job.job, main), 30, f.dl, 0.2)
    chain = _json(run_dir(f, rec, main) / "coord" / "chain.json") or {}
    attempts = chain.get("attempts") if isinstance(chain.get("attempts"), list) else []
    f.say(f"{worker} lost it {'yes' if info else 'NO'}; SIGCONT: {_said(d)}; chain "
          f"{chain.get('status')} ({len(attempts)} attempt(s), main_here "
          f"{chain.get('main_here')}); runs started on {main} after the wake: "
          f"{sorted(started) or 'none'}")  # fmt: skip
    found = check_decision(d, main, ("unreachable",))
    if started or len(attempts) != 1:
        found.append(Violation("restart", main, f"the woken coordinator started an attempt "
                               f"on the main ({sorted(started)}, {len(attempts)} in "
                               "chain.json) while its worker was gone"))  # fmt: skip
    if chain.get("status") != "ended" or chain.get("main_here") is not True:
        found.append(Violation("chain", main, f"the chain did not end for this machine to "
                               f"replace its main: {json.dumps(chain.get('why'))[:160]}"))  # fmt: skip
    f.bad(found, "after the wake")
    text = status(f)
    f.say(f"`mntui status`: {_status_words(text)}")
    f.bad(check_status_torn_down(text, main), "fresh status")
    if "? ?" in text or "did not start" in text:
        f.bad([Violation("status", main, "`mntui status` says no node or an attempt that did "
                         "not start")], "fresh status")  # fmt: skip
    the_end(f)


KINDS: dict[str, Callable[[Fault], None]] = {
    "unauth-flood": unauth_flood,
    "main-wake": main_wake,
}
