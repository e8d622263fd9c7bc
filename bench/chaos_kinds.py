"""The chaos campaign's fault kinds: how each one hits the job and drives it to its end.

Each takes a Fault (bench/chaos_fault.py: launch, settle, kill, checks) and leaves the
chain ended; what it finds wrong is in the fault's outcome. Processes are found by the
run's tag (`MNTUI_RUN=<job>/<run>/<node>`) and the node's sshd by the PID we started it
with, never by name.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Callable

import chaos_attack
import chaos_between
import chaos_cluster
import chaos_renamed
from chaos_checks import ORPHAN_LINE, Violation, check_orphan_line
from chaos_fault import Fault, HarnessError, last_line, signal_each
from chaos_job import Profile, until
from fakecluster import alive, process_tree

from mntui.sessions.agent import AgentClient
from mntui.sessions.agent.place import AgentUnavailable, read_agent_file
from mntui.sessions.wire import message


def rank_exit(f: Fault) -> None:
    """The job's own rank exits 3 at `fail_step` (the job's args carry the fault)."""
    f.launch()
    f.say(f"rank {int(f.plan.pick * 2)} exits 3 at step {f.plan.fail_step}")
    f.finish(0)


def launcher_kill(f: Fault) -> None:
    rec, node = f.target()
    pids = f.job.procs(rec, node, launcher=True)
    if not pids:
        raise HarnessError(f"no torchrun of attempt {rec.attempt} on {node}")
    f.say(f"SIGKILL torchrun {pids[0]} on {node} (attempt {rec.attempt})")
    signal_each(pids[:1], signal.SIGKILL)
    f.finish(rec.attempt)


def worker_stop(f: Fault) -> None:
    rec, node = f.target()
    pids = f.job.procs(rec, node, launcher=False)
    if not pids:
        raise HarnessError(f"no worker of attempt {rec.attempt} on {node}")
    f.say(f"SIGSTOP worker {pids[0]} on {node} (attempt {rec.attempt})")
    signal_each(pids[:1], signal.SIGSTOP)
    f.finish(rec.attempt)


def sshd_stop(f: Fault) -> None:
    """The node's sshd and its connections stopped (a partition): SIGCONT once the
    supervisor has decided, or after a minute."""
    rec, node = f.target()
    sshd = f.fc.node(node).proc
    assert sshd is not None
    tree = process_tree(sshd.pid)
    f.job.stopped += tree
    f.say(f"SIGSTOP sshd of {node} ({len(tree)} processes, attempt {rec.attempt})")
    signal_each(tree, signal.SIGSTOP)

    def decided() -> bool:
        now = f.job.latest()
        return now is not None and (now.run_id != rec.run_id or now.status.value != "running")

    ok = until(decided, 60, f.dl, 0.3)
    signal_each(tree, signal.SIGCONT)
    f.job.stopped.clear()
    f.say(f"SIGCONT sshd of {node}: {'after the decision' if ok else 'no decision in 60s'}")
    f.finish(rec.attempt, exempt=node)


def tmux_kill(f: Fault) -> None:
    rec, node = f.target()
    f.say(f"tmux kill-server on {node} (attempt {rec.attempt})")
    f.fc.node(node).tmux("kill-server")
    f.finish(rec.attempt)


LAUNCH_STEPS = {  # ctrl-c: the launch's event line after which Ctrl+C comes
    "connecting": r" connecting ",
    "checked": r" checked ",
    "main-started": r"\[0\] +started ",
    "waiting": r" waiting ",
    "ready": r" ready ",
    "worker-started": r"\[1\] +started ",
    "running": r"job +running ",
}


# The launch's words that every node had started: it finished, or a Ctrl+C came after the
# run was running (before its `launched` line) and the job runs on, guarded (job_verbs.py).
STARTED_ALL = r"(?m)^(launched |mntui: interrupted after every node had started)"


def ctrl_c(f: Fault) -> None:
    """SIGINT to the launch's process group, as a terminal's Ctrl+C, `delay / 10` s after
    the launch printed the step `moment` (its events are flushed line by line)."""
    log = f.root / f"{f.job.job}.launch.log"
    proc = f.job.popen("launch", "--no-ui", log=log)
    step = re.compile(LAUNCH_STEPS[f.plan.moment])
    until(lambda: proc.poll() is not None or step.search(log.read_text(errors="replace")),
          60, f.dl, 0.01)  # fmt: skip
    until(lambda: proc.poll() is not None, f.plan.delay / 10, f.dl, 0.01)
    if proc.poll() is not None:
        f.say(f"launch ended (exit {proc.returncode}) before Ctrl+C after {f.plan.moment}")
        f.user_kill()
        return
    rec = f.job.latest()
    f.say(f"Ctrl+C after {f.plan.moment} (run: {rec.status.value if rec else 'not recorded'})")
    os.killpg(proc.pid, signal.SIGINT)
    if until(lambda: proc.poll() is not None, 45, f.dl, 0.1) is None:
        f.bad([Violation("ctrl-c", None, "launch still running 45s after Ctrl+C")], "")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    text = log.read_text(errors="replace")
    tb = " (a traceback)" if "Traceback" in text else ""
    f.say(f"launch exit {proc.returncode}{tb}: {last_line(text)}")
    until(lambda: f.ended() or f.job.supervisor(), 30, f.dl, 0.3)
    launched = re.search(STARTED_ALL, text) is not None
    if f.ended() or not launched:  # interrupted: the run aborted, nothing left
        f.check("after Ctrl+C", need_record=False)
    if not f.ended():  # it went on: then a supervisor guards it, or status says none does
        sup = f.job.supervisor()
        res = f.job.mntui("status", timeout=90)
        said = [ln for ln in res.stdout.splitlines() if ORPHAN_LINE.search(ln)]
        f.say(f"the job runs on after Ctrl+C, supervisor {sup or 'none'}; `mntui status`: "
              f"{said[0] if said else 'no supervisor line'}")  # fmt: skip
        if sup is None and not said:
            f.bad([Violation("unguarded", None, f"after Ctrl+C ({f.plan.moment}) the run is "
                             f"{f.where()}, and `mntui status` does not say so")],
                  "after Ctrl+C")  # fmt: skip
        f.user_kill()
    elif f.out.violations:  # (a launch cut before its record leaves none: no violation)
        f.user_kill(need_record=launched)


def double_kill(f: Fault) -> None:
    rec = f.reach(f.plan.moment)
    t0 = time.time()
    logs = [f.root / f"{f.job.job}.kill{i}.log" for i in (1, 2)]
    procs = [f.job.popen("kill", log=log) for log in logs]
    f.say(f"two `mntui kill` at once ({f.plan.moment}, attempt {rec.attempt}): {f.where()}")
    until(lambda: all(p.poll() is not None for p in procs), 150, f.dl, 0.1)
    for p, log in zip(procs, logs, strict=True):
        f.say(f"kill pid {p.pid} exit {p.poll()}: {last_line(log.read_text(errors='replace'))}")
    f.no_restart_since = (time.time(), "the double kill")
    f.after_kill(t0)


def partial_kill(f: Fault) -> None:
    rec, node = f.target()
    f.no_restart_since = (time.time(), f"`mntui kill {node}`")
    f.user_kill(node)
    f.finish(rec.attempt)


def supervisor_kill(f: Fault) -> None:
    """SIGKILL the chain's `mntui watch` while watching, in the backoff or mid-relaunch;
    then `mntui status` must say so, and `mntui kill` end the chain or `mntui watch`
    resume it."""
    moment = f.plan.moment
    f.reach(moment)
    pid = f.job.supervisor()
    if pid is None:
        raise HarnessError(f"no supervisor to kill ({f.where()})")
    at = f.where()
    os.kill(pid, signal.SIGKILL)
    until(lambda: not alive([pid]), 10, f.dl, 0.05)
    f.say(f"SIGKILL supervisor {pid} ({moment}): {at}")
    res = f.job.mntui("status", timeout=90)
    said = [ln for ln in res.stdout.splitlines() if ORPHAN_LINE.search(ln)]
    f.say(f"`mntui status` exit {res.returncode}: {said[0] if said else 'no supervisor line'}")
    f.bad(check_orphan_line(res.stdout + res.stderr), "after the supervisor's death")
    if f.plan.then == "resume":
        _resume(f)
    else:
        f.user_kill()


def _resume(f: Fault) -> None:
    rec = f.job.latest()
    assert rec is not None
    want = rec.attempt  # the latest attempt, or a later one, must train under the new watch
    w = f.job.popen("watch", log=f.root / f"{f.job.job}.watch.log")

    def resumed() -> str | None:
        if w.poll() is not None:
            return "exited"
        return "training" if f.job.training(want) and f.job.supervisor() == w.pid else None

    how = until(resumed, 90, f.dl, 0.3)
    text = (f.root / f"{f.job.job}.watch.log").read_text(errors="replace")
    f.say(f"`mntui watch` resumed: {how or 'no'} ({last_line(text)})")
    if how != "training":
        f.bad([Violation("resume", None, f"`mntui watch` did not resume the chain to attempt "
                         f"{want} training ({how or 'timeout'}): {last_line(text)}")], "")  # fmt: skip
    f.user_kill()
    if until(lambda: w.poll() is not None, 30, f.dl, 0.2) is None:
        f.bad([Violation("resume", None, "the resumed `mntui watch` still runs 30s after the kill")],
              "after mntui kill")  # fmt: skip


def client_drop(f: Fault) -> None:
    """A client of the run's agent that goes away mid-request; the agent must still answer."""
    rec, _ = f.target()
    path, _ = read_agent_file(rec.dir)
    sends = {
        "partial": message(op="status", run=rec.run_id)[:-9],  # no end of line
        "logs": message(
            op="logs", run=rec.run_id, nodes={n.node: {"lines": 50} for n in rec.nodes}
        ),
        "subscribe": message(op="subscribe", run=rec.run_id, back=4096),
        "silent": b"",
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        sock.sendall(sends[f.plan.moment])
    f.say(f"client dropped mid-request ({f.plan.moment}, attempt {rec.attempt})")

    def answers() -> bool:
        try:
            with AgentClient.connect(rec.dir, timeout=2) as client:
                return bool(client.request("status", timeout=3, run=rec.run_id))
        except AgentUnavailable:
            return False

    if until(answers, 15, f.dl, 0.5) is None:
        f.bad([Violation("agent", None, f"the agent stopped answering after a client "
                         f"dropped mid-request ({f.plan.moment})")], "after the drop")  # fmt: skip
    f.user_kill()


KINDS: dict[str, Callable[[Fault], None]] = {
    "rank-exit": rank_exit,
    "launcher-kill": launcher_kill,
    "worker-stop": worker_stop,
    "sshd-stop": sshd_stop,
    "tmux-kill": tmux_kill,
    "ctrl-c": ctrl_c,
    "double-kill": double_kill,
    "partial-kill": partial_kill,
    "supervisor-kill": supervisor_kill,
    "client-drop": client_drop,
    **chaos_between.KINDS,  # between two attempts: a kill after the failure, a quarantine
    **chaos_cluster.KINDS,  # the watch on the cluster (issue 30): profile `cluster` only
    **chaos_attack.KINDS,  # a flood at its port, a frozen main that wakes (issue 39): `cluster`
    **chaos_renamed.KINDS,  # a job that hides from its tag (issue 39): `cluster` only
}
PROFILES: dict[str, tuple[Profile, ...]] = {
    "rank-exit": (Profile.PLAIN, Profile.RESTART),
    "sshd-stop": (Profile.PLAIN, Profile.RESTART),
    "ctrl-c": (Profile.PLAIN, Profile.RESTART),
    "client-drop": (Profile.PLAIN, Profile.RESTART),
    "supervisor-kill": (Profile.RESTART, Profile.SPARE),
    **chaos_between.PROFILES,
    **chaos_cluster.PROFILES,
    **chaos_attack.PROFILES,
    **chaos_renamed.PROFILES,
}  # the others: any profile the manager's watchdog runs (chaos_job.LOCAL)
MOMENTS = {
    "supervisor-kill": ("watching", "backoff", "relaunch"),  # backoff, relaunch: restart only
    "double-kill": ("watching", "backoff", "relaunch"),
    "client-drop": ("partial", "logs", "subscribe", "silent"),
    "ctrl-c": tuple(LAUNCH_STEPS),
    **chaos_between.MOMENTS,
    **chaos_attack.MOMENTS,
}
