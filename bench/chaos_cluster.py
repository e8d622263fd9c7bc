"""The chaos campaign's faults of the watch on the cluster (issue 30), profile `cluster`.

With `watch.where: cluster` nothing on this machine watches the run: a sentinel on each
node and a coordinator on the main decide (unreachable_after 5 s, frozen_after 2 s, no
restart). The faults cut the manager off, kill or freeze the job with the manager cut
off, and kill or freeze the watch's own parts:

- `manager-partition`: every node's sshd tree SIGSTOPped for 2 x unreachable_after + 2 s,
  nothing else: no teardown (the cluster never decides on the manager's silence), the job
  trains on; then the user's kill leaves nothing.
- `partition-rank-exit` / `partition-freeze`: in such a partition (`delay` s into it) a
  rank of the picked node SIGKILLed / SIGSTOPped: the cluster takes the whole job down
  while still partitioned, its decision naming that node (failed or orphaned / frozen).
- `manager-sleep`: `mntui status --watch` SIGSTOPped for 2 x unreachable_after, then a rank
  SIGKILLed: the cluster tears down; SIGCONT; a fresh `mntui status` says torn-down
  naming the node.
- `node-watch-death`: the worker's sentinel and its guard SIGKILLed (stopped first, so
  neither starts the other again): the coordinator decides that node unreachable, no
  sooner than unreachable_after; then `mntui kill` leaves nothing.
- `sentinel-death` / `coordinator-death` / `main-sentinel-death`: the worker's sentinel /
  the coordinator / the main's sentinel SIGKILLed (by its pid file): the other of the
  node's two watchers (the guard, the main's sentinel, the coordinator) starts it again
  within RESPAWN s (node/proc/respawn.py, node/sentinel/guard.py),
  the journal says so, and past 2 x unreachable_after nothing was decided, no sentinel
  called its coordinator lost, every node trained on; then the user's kill leaves nothing.
- `main-lost`: the main's coordinator, sentinel and ranks SIGSTOPped (not its sshd): the
  worker's sentinel tears its node down (lost.json); SIGCONT; `mntui kill` leaves nothing.

Every fault ends with the user's `mntui kill` and a `mntui status`, then: nothing tagged
with the job on any node (ranks, sentinels, coordinators), no tmux session, the master and
coordinator ports free, every run record terminal. Times (fault to decision, to the job
down) go into the outcome's `times`. Processes are found by tag or by the sshd PID we
started, never by name.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos_checks import (
    Violation,
    check_account,
    check_chain,
    check_decision,
    check_journal_respawn,
    check_lost,
    check_no_decision,
    check_not_lost,
    check_port,
    check_processes,
    check_respawned,
    check_sessions,
    check_status_torn_down,
    check_steps_advanced,
    check_watchers,
    failed_attempts,
    watchers,
)
from chaos_fault import Fault, HarnessError, last_line, signal_each
from chaos_job import Profile, until
from fakecluster import alive, cmdline, pids_with_env, proc_state, process_tree, tagged

from mntui.sessions.errors import state_dir
from mntui.sessions.runs import RunRecord, RunStatus

UNREACHABLE = 5.0  # the profile's watch.unreachable_after (chaos_job.CLUSTER_WATCH)
# silence counts from the last word, up to one heartbeat (clusterwatch.HEARTBEAT 1 s, and
# a little slack) before the fault: no decision on it comes sooner than this after it
NOT_BEFORE = UNREACHABLE - 1.3
PARTITION = 2 * UNREACHABLE + 2  # seconds the manager is cut off (manager-partition)
DOWN = 45.0  # seconds for the cluster to take the job down after a fault
STEPS = 10  # steps each node trains at least during a partition (0.3 s a step: ~40)
RESPAWN = 5.0  # seconds for a node's other watcher to start a dead one again (~0.2 s)
PROFILES = dict.fromkeys(("manager-partition", "partition-rank-exit", "partition-freeze", "manager-sleep", "sentinel-death", "node-watch-death", "coordinator-death", "main-sentinel-death", "main-lost"), (Profile.CLUSTER,))  # fmt: skip


# -- what the watch wrote, and what of the job lives ---------------------------------------


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_dir(f: Fault, rec: RunRecord, node: str) -> Path:
    return Path(f.fc.node(node).home) / ".mntui" / "runs" / f.job.job / rec.run_id / node


def decision(f: Fault, rec: RunRecord) -> dict[str, Any] | None:
    return _json(run_dir(f, rec, rec.nodes[0].node) / "coord" / "decision.json")


def finished(f: Fault, rec: RunRecord) -> dict[str, Any] | None:
    """The decision once complete (a teardown's `ended_at` comes after its kills)."""
    d = decision(f, rec)
    return d if d is not None and "ended_at" in d else None


def lost(f: Fault, rec: RunRecord, node: str) -> dict[str, Any] | None:
    return _json(run_dir(f, rec, node) / "lost.json")


def everything(job: str) -> list[int]:
    """Every live process of the job: ranks, launchers, pane shells, sentinels, coordinator."""
    return tagged(job) + watchers(job)


def node_side(job: str, node: str) -> list[int]:
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{re.escape(node)}(/[^/]+)?"))


def steps(f: Fault, rec: RunRecord) -> dict[str, int]:
    return {n.node: len(re.findall(r"(?m)^step \d+ ", f.job.log(rec, n.node))) for n in rec.nodes}


def a_rank(f: Fault, rec: RunRecord, node: str) -> int:
    ranks = f.job.procs(rec, node, launcher=False)
    if not ranks:
        raise HarnessError(f"no rank of {f.job.job} on {node}")
    return ranks[0]


def watch_port(f: Fault) -> int:
    m = re.search(r"where: cluster, port: (\d+)", f.job.cfg.read_text())
    if m is None:
        raise HarnessError("not a cluster-watch config")
    return int(m[1])


def stop(f: Fault, pids: list[int]) -> list[int]:
    """SIGSTOP `pids`; the job's cleanup SIGCONTs them whatever happens."""
    f.job.stopped += pids
    signal_each(pids, signal.SIGSTOP)
    return pids


def cont(f: Fault, pids: list[int]) -> None:
    signal_each(pids, signal.SIGCONT)
    f.job.stopped[:] = [p for p in f.job.stopped if p not in pids]


def partition(f: Fault) -> list[int]:
    """This machine cut off from every node: their sshd trees stopped."""
    tree = [p for n in f.fc.nodes if n.proc is not None for p in process_tree(n.proc.pid)]
    return stop(f, tree)


# -- checks and the end every fault shares ------------------------------------------------------


def check_all(f: Fault, phase: str, chain: bool = True) -> bool:
    """Nothing of the job on any node, no session, both ports free; `chain`: the chain
    ended too (the local record learns the cluster's ending at the next `mntui status`)."""
    nodes = [n.name for n in f.fc.nodes]
    found = check_processes(f.job.job, nodes) + check_watchers(f.job.job, nodes)
    found += check_port(f.job.port) + check_port(watch_port(f), "coordinator port")
    found += check_sessions(f.job.sessions())
    found += check_chain(f.job.records()) if chain else []
    f.bad(found, phase)
    return bool(found)


def gone_while(f: Fault, phase: str) -> None:
    """Every tagged process of the job gone now (`phase`: still partitioned...)."""
    nodes = [n.name for n in f.fc.nodes]
    f.bad(check_processes(f.job.job, nodes) + check_watchers(f.job.job, nodes), phase)


def status(f: Fault) -> str:
    res = f.job.mntui("status", timeout=90)
    text = res.stdout + res.stderr
    if "Traceback" in text:
        f.bad([Violation("status", None, f"`mntui status` exit {res.returncode}: a traceback: "
                  f"{last_line(text)}")], "status")  # fmt: skip
    return text


def the_end(f: Fault) -> None:
    """The user's `mntui kill`, then `mntui status`: nothing left, every record ended."""
    coord = _coord_state(f)
    t0 = time.monotonic()
    res = f.job.mntui("kill")
    f.out.times["kill"] = round(time.monotonic() - t0, 2)
    f.say(f"`mntui kill` (coordinator {coord}) exit {res.returncode}: "
          f"{last_line(res.stdout + res.stderr)}")  # fmt: skip
    until(lambda: not everything(f.job.job), 30, f.dl, 0.3)
    text = status(f)
    f.say(f"`mntui status`: {_status_words(text)}")
    check_all(f, "after mntui kill")
    account(f, res.stdout + res.stderr)


def account(f: Fault, kill_text: str) -> None:
    """The manager's account of the chain against the coordinator's journal (issue 37):
    the kill named the attempt's nodes, history counts the chain's failures, and every
    failed attempt's saved report names the node the coordinator named first."""
    recs = f.job.records()
    first = next((r for r in recs if r.attempt == 0), None)
    if first is None or not first.nodes:
        return
    chain = _json(run_dir(f, first, first.main.node) / "coord" / "chain.json")
    hist = f.job.mntui("history", "--json", "--job", f.job.job)
    try:
        chains = json.loads(hist.stdout)["chains"]
        mine = next((c for c in chains if c.get("chain") == first.run_id), None)
        losses = len(mine["losses"]) if mine is not None else 0
    except (ValueError, KeyError, TypeError):
        losses = None
        f.bad([Violation("account", None, f"`mntui history --json`: {last_line(hist.stdout)}")],
              "account")  # fmt: skip
    causes: dict[str, str | None] = {}
    for e in failed_attempts(chain or {}):
        run = str(e.get("run"))
        f.job.mntui("report", "--run", run, timeout=180)  # the first look saves it
        saved = _json(state_dir() / f.job.job / run / "report.json")
        causes[run] = str(saved.get("cause_node")) if saved is not None else None
    answered = "asked the coordinator" in kill_text
    f.bad(check_account(chain, kill_text, answered, losses, causes), "account")


def _coord_state(f: Fault) -> str:
    """The coordinator's PID file on the main and that process's state now (a zombie is
    still there for `kill -0`, which the kill's request script asks)."""
    rec = f.job.latest()
    if rec is None or not rec.nodes:
        return "no run"
    try:
        pid = int((run_dir(f, rec, rec.nodes[0].node) / "coord.pid").read_text().strip())
    except (OSError, ValueError):
        return "no coord.pid"
    return f"pid {pid} {proc_state(pid) or 'gone'}"


def _status_words(text: str) -> str:
    head = re.search(r"\((" + "|".join(s.value for s in RunStatus) + r")\)", text)
    said = re.search(r"the coordinator (tore the job down|saw the job end)[^\n]*", text)
    return f"({head[1] if head else '?'}) {said[0][:140] if said else 'no decision line'}"


def _times(f: Fault, t0: float, d: dict[str, Any] | None, down: float | None) -> None:
    at = d.get("decided_at") if d else None
    if isinstance(at, (int, float)):
        f.out.times["decision"] = round(at - t0, 2)
    if down is not None:
        f.out.times["down"] = round(down, 2)


def _secs(t: float | None) -> str:
    return "NOT" if t is None else f"{t:.1f}s"


def _down(f: Fault, t0: float, what: Callable[[], bool], timeout: float = DOWN) -> float | None:
    ok = until(what, timeout, f.dl, 0.2)
    return time.time() - t0 if ok else None


# -- the kinds ----------------------------------------------------------------------------


def manager_partition(f: Fault) -> None:
    """Cut off for 2 x unreachable_after + 2 s: no decision, the job trains on."""
    rec, _ = f.target()
    before = steps(f, rec)
    cut = partition(f)
    f.say(f"SIGSTOP every node's sshd ({len(cut)} processes) for {PARTITION:g}s")
    seen = until(lambda: decision(f, rec), PARTITION, f.dl, 0.5)
    after = steps(f, rec)
    cont(f, cut)
    f.say(f"SIGCONT: steps {before} -> {after}, decision {'SEEN' if seen else 'none'}")
    f.bad(check_no_decision(decision(f, rec), "a partition of the manager"), "partitioned")
    f.bad(check_steps_advanced(before, after, STEPS), "partitioned")
    if not watchers(f.job.job, rec.nodes[0].node):
        f.bad([Violation("watchers", None, "no coordinator or sentinel left on the main "
                         "after the partition, and no decision")], "partitioned")  # fmt: skip
    the_end(f)


def _partition_hit(f: Fault, sig: signal.Signals, states: tuple[str, ...]) -> None:
    rec, node = f.target()
    cut = partition(f)
    until(lambda: False, f.plan.delay, f.dl, 0.1)  # `delay` s into the partition
    rank = a_rank(f, rec, node)
    t0 = time.time()
    signal_each([rank], sig)
    f.say(f"partitioned ({len(cut)} sshd processes stopped); {sig.name} rank {rank} on {node}")
    down = _down(f, t0, lambda: not everything(f.job.job))
    d = finished(f, rec) or decision(f, rec)
    gone_while(f, "still partitioned")
    cont(f, cut)
    _times(f, t0, d, down)
    f.say(f"SIGCONT: job down {_secs(down)} after the hit; {_said(d)}")
    f.bad(check_decision(d, node, states), "the decision")
    _ended_alone(f, rec, node)


def _said(d: dict[str, Any] | None) -> str:
    if d is None:
        return "no decision.json"
    if "ended" in d:
        return f"decision: the job ended {d['ended']}"
    return f"decision: {d.get('decided_by')} {d.get('node')} {d.get('state')}: {d.get('why')}"


def _ended_alone(f: Fault, rec: RunRecord, node: str) -> None:
    """The cluster ended the job: as it is, then `mntui status` says so, then the kill."""
    check_all(f, "at the end", chain=False)
    text = status(f)
    f.say(f"`mntui status`: {_status_words(text)}")
    f.bad(check_status_torn_down(text, node), "fresh status")
    the_end(f)


def partition_rank_exit(f: Fault) -> None:
    _partition_hit(f, signal.SIGKILL, ("failed", "orphaned"))


def partition_freeze(f: Fault) -> None:
    _partition_hit(f, signal.SIGSTOP, ("frozen",))


def manager_sleep(f: Fault) -> None:
    """This machine's `mntui status --watch` asleep (SIGSTOP) while a rank dies."""
    rec, node = f.target()
    log = f.root / f"{f.job.job}.statuswatch.log"
    w = f.job.popen("status", "--watch", log=log)
    if not until(lambda: "watch: the cluster" in log.read_text(errors="replace"), 60, f.dl, 0.2):
        raise HarnessError(
            f"`mntui status --watch` never showed the run: {last_line(log.read_text())}"
        )
    stop(f, [w.pid])
    until(lambda: False, 2 * UNREACHABLE, f.dl, 0.5)
    rank = a_rank(f, rec, node)
    t0 = time.time()
    signal_each([rank], signal.SIGKILL)
    f.say(f"`mntui status --watch` {w.pid} SIGSTOPped {2 * UNREACHABLE:g}s; SIGKILL rank {rank} "
          f"on {node}")  # fmt: skip
    down = _down(f, t0, lambda: not everything(f.job.job))
    d = finished(f, rec) or decision(f, rec)
    cont(f, [w.pid])
    _times(f, t0, d, down)
    f.say(f"SIGCONT status --watch: job down {_secs(down)}; {_said(d)}")
    f.bad(check_decision(d, node, ("failed", "orphaned")), "the decision")
    until(lambda: w.poll() is not None, 8, f.dl, 0.2)  # it may end by itself on the decision
    if w.poll() is None:
        signal_each([w.pid], signal.SIGINT)  # the user's Ctrl+C
        until(lambda: w.poll() is not None, 15, f.dl, 0.2)
    text = log.read_text(errors="replace")
    f.say(f"status --watch exit {w.poll()}: {_status_words(text[-3000:])}")
    if "Traceback" in text:
        f.bad([Violation("status", None, f"`mntui status --watch` resumed into a traceback: "
                         f"{last_line(text)}")], "after the SIGCONT")  # fmt: skip
    _ended_alone(f, rec, node)


def node_watch_death(f: Fault) -> None:
    rec, _ = f.target()
    main, node = rec.nodes[0].node, rec.nodes[-1].node
    pids = [p for p in watchers(f.job.job, node) if cmdline(p) and _role(p) in WATCH_ROLES]
    if sorted(map(_role, pids)) != sorted(WATCH_ROLES):
        raise HarnessError(f"not one sentinel and one guard on {node}: {pids}")
    signal_each(pids, signal.SIGSTOP)  # neither starts the other again meanwhile
    t0 = time.time()
    signal_each(pids, signal.SIGKILL)
    f.say(f"SIGKILL {node}'s sentinel and guard {pids}")
    d = until(lambda: finished(f, rec), DOWN, f.dl, 0.2)
    down = _down(f, t0, lambda: not node_side(f.job.job, main), 30)
    _times(f, t0, d, down)
    took = f.out.times.get("decision")
    f.say(f"main down {_secs(down)}; {node}'s ranks left: "
          f"{len(tagged(f.job.job, node))}; {_said(d)}")  # fmt: skip
    f.bad(check_decision(d, node, ("unreachable",), took, NOT_BEFORE), "the decision")
    f.bad(check_processes(f.job.job, [main]) + check_watchers(f.job.job, [main]), "at the end")
    text = status(f)
    f.say(f"`mntui status`: {_status_words(text)}")
    f.bad(check_status_torn_down(text, node), "fresh status")
    the_end(f)


WATCH_ROLES = ("guard", "sentinel")  # a worker's two watchers


def _role(pid: int) -> str:
    env = Path(f"/proc/{pid}/environ")
    try:
        tag = next(e for e in env.read_bytes().split(b"\0") if e.startswith(b"MNTUI_RUN="))
    except (OSError, StopIteration):
        return ""
    return tag.decode(errors="replace").rsplit("/", 1)[-1]


def _pid_of(f: Fault, rec: RunRecord, role: str, node: str) -> int | None:
    """A node's coordinator, sentinel or guard named by its pid file, if that pid is
    alive with the role's own tag (a reused pid is not it)."""
    try:
        pid = int((run_dir(f, rec, node) / f"{role}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid in watchers(f.job.job, node) and _role(pid) == role else None


def _journal(f: Fault, rec: RunRecord) -> list[dict[str, Any]]:
    path = run_dir(f, rec, rec.nodes[0].node) / "coord" / "journal.jsonl"
    out = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def _death(f: Fault, role: str, name: str, worker: bool = False) -> None:
    """The main's (or the worker's) `role` SIGKILLed: started again by the other of the
    node's two watchers, and the job trains on."""
    rec, _ = f.target()
    node = rec.nodes[-1 if worker else 0].node
    old = _pid_of(f, rec, role, node)
    if old is None:
        raise HarnessError(f"no {name} on {node} named by its pid file")
    before = steps(f, rec)
    t0 = time.time()
    signal_each([old], signal.SIGKILL)
    new = until(lambda: (p := _pid_of(f, rec, role, node)) not in (None, old) and p, RESPAWN,
                f.dl, 0.05)  # fmt: skip
    took = round(time.time() - t0, 2) if new else None
    if took is not None:
        f.out.times["respawn"] = took
    until(lambda: False, max(0.0, t0 + 2 * UNREACHABLE - time.time()), f.dl, 0.5)
    after = steps(f, rec)
    gone = {n.node: lost(f, rec, n.node) for n in rec.nodes}
    f.say(f"SIGKILL the {name} {old}: started again as {new or 'NOT'} in {_secs(took)}; "
          f"steps {before} -> {after}; {_said(decision(f, rec))}")  # fmt: skip
    what = f"the {name}'s death"
    found = check_respawned(name, old, new or None, took, RESPAWN)
    found += check_journal_respawn(_journal(f, rec), name, new or None)
    found += check_no_decision(decision(f, rec), what) + check_not_lost(gone, what)
    found += check_steps_advanced(before, after, STEPS)
    f.bad(found, "after the respawn")
    the_end(f)


def sentinel_death(f: Fault) -> None:
    _death(f, "sentinel", "sentinel", worker=True)


def coordinator_death(f: Fault) -> None:
    _death(f, "coord", "coordinator")


def main_sentinel_death(f: Fault) -> None:
    _death(f, "sentinel", "sentinel")


def main_lost(f: Fault) -> None:
    rec, _ = f.target()
    main, node = rec.nodes[0].node, rec.nodes[-1].node
    held = stop(f, node_side(f.job.job, main))
    t0 = time.time()
    f.say(f"SIGSTOP the main's job side ({len(held)}: coordinator, sentinel, ranks)")
    info = until(lambda: lost(f, rec, node), DOWN, f.dl, 0.2)
    down = _down(f, t0, lambda: not node_side(f.job.job, node), 20)
    if info and isinstance(info.get("lost_at"), (int, float)):
        f.out.times["lost"] = round(info["lost_at"] - t0, 2)
    _times(f, t0, None, down)
    f.bad(check_lost({node: info}, t0, NOT_BEFORE), "main stopped")
    f.bad(check_processes(f.job.job, [node]) + check_watchers(f.job.job, [node]), "main stopped")
    cont(f, held)
    alone = until(lambda: not node_side(f.job.job, main), 30, f.dl, 0.3)
    f.say(f"{node} down {_secs(down)}; SIGCONT: the main's side "
          f"{'ended by itself' if alone else 'still runs'}; {_said(decision(f, rec))}")  # fmt: skip
    the_end(f)


KINDS: dict[str, Callable[[Fault], None]] = {
    "manager-partition": manager_partition,
    "partition-rank-exit": partition_rank_exit,
    "partition-freeze": partition_freeze,
    "manager-sleep": manager_sleep,
    "sentinel-death": sentinel_death,
    "node-watch-death": node_watch_death,
    "coordinator-death": coordinator_death,
    "main-sentinel-death": main_sentinel_death,
    "main-lost": main_lost,
}
