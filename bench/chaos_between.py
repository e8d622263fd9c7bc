"""The chaos campaign's faults between two attempts of a restart chain (issue 28).

`fail-kill`: a user's `mntui kill` right after the job failed, in the supervisor's own
bookkeeping between the watchdog's end of the run and its `restarting` mark: the chain
must end there. Moments: `torn-down` (rank 1 exits, the watchdog tears the job down) and
`failed` (every rank exits at once: the run fails by itself). That window is about 0.1 s
here (86 ms measured), less than a `mntui kill` takes to write its note (0.25 s), so a
kill sent when the run is seen ended lands in the backoff instead. So the supervisor is
held in the window: SIGSTOPped as soon as its run is seen ended (its record read every
5 ms), the real `mntui kill` runs (its agent, frozen too, times out into a direct kill),
and SIGCONT lets the supervisor decide. Where the kill landed (before or after the mark)
is read back from the records and said.

`quarantine`: attempt 0 fails on node1, which is then quarantined before attempt 1, by the
user in the backoff (`user`: `mntui quarantine node1`) or by `restart.quarantine_after`
(`policy`; the user's `mntui quarantine` is started beforehand, Job.armed, and cued
`delay / 3` s into the 4 s backoff). Attempt 1 must run on the spare instead, and when the spare's worker is
SIGSTOPped, attempt 1's watchdog must see it and its teardown kill there: nothing of
attempt 1 left on any node (a stopped worker never leaves by itself), and the teardown's
note naming exactly the nodes the attempt ran on. The quarantines are released after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from chaos_checks import (
    TERMINAL,
    Violation,
    check_kill_recorded,
    check_no_restart_after_kill,
    check_quarantined_out,
    check_run_processes,
    check_teardown_nodes,
    user_kill_at,
)
from chaos_fault import Fault, FaultPlan, HarnessError, last_line
from chaos_job import Profile, release_quarantines, until
from fakecluster import alive

from mntui.sessions.runs import RunRecord, RunStatus, load_run, read_status

MOMENTS = {"fail-kill": ("torn-down", "failed"), "quarantine": ("user", "policy")}
PROFILES = {"fail-kill": (Profile.RESTART,), "quarantine": (Profile.RESTART,)}
NEEDS_SPARE = frozenset({"quarantine"})
BACKOFF = 4.0  # the first backoff: the user's quarantine lands well inside it
POLICY = "quarantine_after: {count: 1, within: 1h, for: 1h}"
# seconds the supervisor stays stopped at most: a kill is done in about a second (0.3 s
# here), unless the supervisor was stopped holding the record's lock, when the kill
# waits for it however long it is held
HELD = 5.0
TEARDOWN = 60.0  # seconds for attempt 1's watchdog to tear it down (frozen_after is 3)


def job_args(plan: FaultPlan) -> str:
    """The job's own failure: attempt 0 only (a later attempt trains, or is hit)."""
    step = f"--fail-step {plan.fail_step} --how exit3 --fail-attempts 1"
    if plan.moment == "failed":
        return f"--fail-if-env BREAK_HERE {step}"
    return f"--fail-rank 1 {step}"


def config(plan: FaultPlan, nodes: list[str]) -> tuple[str, tuple[str, ...]]:
    """What the fault adds to the restart policy and to the config."""
    if plan.kind not in KINDS:
        return "", ()
    restart = POLICY if plan.moment == "policy" else ""
    if plan.moment != "failed":
        return restart, ()
    job = nodes[:-1] if len(nodes) >= 3 else nodes
    every = ", ".join(f"{n}: {{env: {{BREAK_HERE: '1'}}}}" for n in job)
    return restart, (f"overrides: {{{every}}}",)


def _ready(f: Fault, what: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`mntui ARGS`, started and imported, waiting for its cue (`_cue`)."""
    log = f.root / f"{f.job.job}.{what}.log"
    proc = f.job.armed(*args, log=log)
    ok = until(lambda: proc.poll() is not None or "armed" in log.read_text(errors="replace"),
               60, f.dl, 0.05)  # fmt: skip
    if not ok or proc.poll() is not None:
        raise HarnessError(f"`mntui {what}` never got ready: {last_line(log.read_text())}")
    return proc, log


def _cue(proc: subprocess.Popen[bytes], log: Path, timeout: float, f: Fault) -> str:
    """Go; what it said once it ended (or was still running after `timeout`)."""
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.close()
    until(lambda: proc.poll() is not None, timeout, f.dl, 0.05)
    return f"exit {proc.poll()}: {last_line(log.read_text(errors='replace'))}"


def fail_kill(f: Fault) -> None:
    """Attempt 0 fails by itself. The moment its run is seen ended, its supervisor is
    SIGSTOPped (the window is its bookkeeping: the `restarting` mark is ~0.1 s away),
    the user's `mntui kill` runs, and the supervisor goes on: no `restarting` mark after
    the kill's note, no attempt after it."""
    f.launch()
    rec = until(lambda: f.job.training(0), 150, f.dl, 0.3)
    sup = f.job.supervisor()
    if rec is None or sup is None:
        raise HarnessError(f"attempt 0 never trained under a supervisor: {f.where()}")

    def ended() -> RunStatus | None:
        status = read_status(f.job.job, rec.run_id)
        return status if status is not None and status is not RunStatus.RUNNING else None

    seen = until(ended, 120, f.dl, 0.005)
    if seen is None:
        raise HarnessError(f"attempt 0 did not end by itself: {f.where()}")
    f.job.stopped.append(sup)  # SIGCONTed by the cleanup, whatever happens here
    os.kill(sup, signal.SIGSTOP)
    marked = _marked(f, rec.run_id)
    f.say(f"attempt 0 {seen.value}: supervisor {sup} SIGSTOPped "
          f"{'AFTER its `restarting` mark (missed)' if marked else 'before its `restarting` mark'}")  # fmt: skip
    t0 = time.time()
    log = f.root / f"{f.job.job}.kill.log"
    kill = f.job.popen("kill", log=log)
    if until(lambda: kill.poll() is not None, HELD, f.dl, 0.05) is None:
        f.say(f"`mntui kill` still waits {HELD:g}s on: the supervisor was stopped holding the "
              "run's lock; it goes on now")  # fmt: skip
    os.kill(sup, signal.SIGCONT)
    f.job.stopped.remove(sup)
    until(lambda: kill.poll() is not None, 150, f.dl, 0.1)
    f.say(f"`mntui kill` exit {kill.poll()}: {last_line(log.read_text(errors='replace'))}")
    f.say(_landed(f.job.records(), rec.run_id))
    f.no_restart_since = (t0, "the kill right after the failure")
    f.after_kill(t0)
    recs = f.job.records()
    f.bad(check_kill_recorded(recs, t0) + check_no_restart_after_kill(recs), "after mntui kill")


def _marked(f: Fault, run_id: str) -> bool:
    now = load_run(f.job.job, run_id)
    return now is not None and any(h.get("what") == "restart" for h in now.history)


def _landed(recs: list[RunRecord], run_id: str) -> str:
    """Where the user's kill was written: before or after the supervisor's mark."""
    at = user_kill_at(recs)
    if at is None:
        return "the kill left no note on the chain"
    first = next((r for r in recs if r.run_id == run_id), None)
    marks = [h["at"] for h in (first.history if first else []) if h.get("what") == "restart"]
    if not marks:
        return "kill noted; no `restarting` mark: it landed in the window"
    side = "in the window" if at < marks[0] else "after the mark (in the backoff)"
    return f"kill noted {at - marks[0]:+.3f}s from the `restarting` mark: {side}"


def quarantine(f: Fault) -> None:
    """Attempt 0 fails on node1; node1 is quarantined (by the user in the backoff, `delay
    / 3` s into it, or by the policy); attempt 1 runs on the spare, which is then hit."""
    names = [n.name for n in f.fc.nodes]
    node, spare = names[1], names[-1]
    user = f.plan.moment == "user"
    if user:
        proc, log = _ready(f, "quarantine", "quarantine", node, "--for", "1h", "--why", "chaos")
    f.launch()
    if until(lambda: f.job.training(0), 150, f.dl, 0.3) is None:
        raise HarnessError(f"attempt 0 never trained: {f.where()}")
    sup = f.job.supervisor()
    if user:
        if until(_restarting(f), 180, f.dl, 0.05) is None:
            raise HarnessError(f"the chain never reached its backoff: {f.where()}")
        until(lambda: False, f.plan.delay / 3, f.dl, 0.02)
        f.say(f"`mntui quarantine {node}` in the backoff: {_cue(proc, log, 60, f)}")

    def trained() -> RunRecord | str | None:
        if sup is not None and not alive([sup]):
            return "its supervisor died"
        return f.job.training(1)

    rec = until(trained, 240, f.dl, 0.3)
    held = _held()
    f.say(f"quarantined: {', '.join(sorted(held)) or 'none'}; attempt 1: {f.where()}")
    if not isinstance(rec, RunRecord):
        why = f"{rec}: {_last_words(f)}" if rec else "in 240s"
        f.bad([Violation("quarantine", None, f"attempt 1 never trained ({why}): {f.where()}")],
              "after the quarantine")  # fmt: skip
        now = next((r for r in f.job.records() if r.attempt == 1), None)
        if now is not None:
            f.bad(check_quarantined_out(now, held), "attempt 1's launch")
            _left(f, now, check=bool(rec) or now.status in TERMINAL)
        f.user_kill()
        f.say(f"released quarantines: {', '.join(release_quarantines()) or 'none'}")
        return
    f.bad(check_quarantined_out(rec, held), "attempt 1's launch")
    _hit_the_spare(f, rec, spare)
    f.finish(1)
    f.say(f"released quarantines: {', '.join(release_quarantines()) or 'none'}")


def _last_words(f: Fault) -> str:
    """The chain's `mntui watch` log's last line (a dead supervisor's error)."""
    recs = f.job.records()
    try:
        return last_line((recs[0].dir / "watch.log").read_text(errors="replace")) if recs else "-"
    except OSError:
        return "no watch.log"


def _restarting(f: Fault) -> Callable[[], RunRecord | None]:
    def restarting() -> RunRecord | None:
        rec = f.job.latest()
        return rec if rec is not None and rec.status is RunStatus.RESTARTING else None

    return restarting


def _held() -> dict[str, float]:
    from mntui.sessions.history import active_quarantines

    return {n: q.when for n, q in active_quarantines().items()}


def _hit_the_spare(f: Fault, rec: RunRecord, spare: str) -> None:
    """SIGSTOP attempt 1's worker on the spare (or on its rank 1, wherever that runs);
    its teardown must reach it."""
    target = next((n.node for n in rec.nodes if n.node == spare),
                  next(n.node for n in rec.nodes if n.rank == 1))  # fmt: skip
    pids = f.job.procs(rec, target, launcher=False)
    if not pids:
        raise HarnessError(f"no worker of attempt 1 on {target}")
    f.say(
        f"SIGSTOP worker {pids[0]} on {target} (attempt 1 on {','.join(n.node for n in rec.nodes)})"
    )
    _stop(pids[0])

    def torn() -> RunRecord | None:
        now = load_run(f.job.job, rec.run_id)
        done = now is not None and any(h.get("what") == "watchdog-teardown" for h in now.history)
        return now if done else None

    done = until(torn, TEARDOWN, f.dl, 0.2)
    if done is None:
        f.bad([Violation("teardown", target, f"attempt 1 not torn down {TEARDOWN:g}s after its "
                         f"worker on {target} stopped: {f.where()}")], "after the stop")  # fmt: skip
        return
    _left(f, done, check=True)


def _left(f: Fault, rec: RunRecord, check: bool) -> None:
    """What attempt `rec`'s teardown did: the nodes its note names, and (`check`: the
    run has ended, or nobody guards it any more) nothing of it left on any node."""
    f.bad(check_teardown_nodes(rec), "at attempt 1's teardown")
    nodes = [n.name for n in f.fc.nodes]
    if check and not until(lambda: not check_run_processes(f.job.job, rec.run_id, nodes), 5,
                           f.dl, 0.2):  # fmt: skip
        f.bad(check_run_processes(f.job.job, rec.run_id, nodes), "after attempt 1's teardown")


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        pass


KINDS = {"fail-kill": fail_kill, "quarantine": quarantine}
