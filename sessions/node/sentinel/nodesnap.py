"""The node as a poll would see it, built by its sentinel for `status` (nodewire.py's shape).

Why: a run the cluster watches has no poller on its nodes, yet its status must say what
a polled run's says: each process of the job (pid, ppid, state, CPU, memory, command
line), the ports they listen on, the tmux pane, the log, the node's load and memory. The
sentinel already follows the ranks (proctree.py) and knows the pane and the log (its
Facts); this adds what the poller reads besides, from /proc, at its own pace, so the
sentinel's sampling stays within its budget (≤ 5 ms of CPU a sample):

- each process's stat once a snapshot, every EVERY seconds (CPU from the ticks since the
  snapshot before, as the poller's rate between two polls; None at first sight);
- a command line once per process (its pid and start time), bounded and made one line
  without controls by the rule the poller's goes through (termsafe.one_line);
- the ports every PORTS_EVERY seconds (listens.py: the kernel's listening sockets,
  and the fds of a process new since, or of all when a new one listens);
- at most MAX_PROCS processes, the lowest pids first (the launch's shell, then ranks).

The Outbox sends a snapshot with the next snap when it changed since that channel last
sent one, or RESEND seconds after: a new coordinator has it within seconds. Its CPU
numbers move, so it is news nearly every time: EVERY bounds what a node costs the
coordinator (80 processes: 14 KB checked in 0.2 ms).
"""

from __future__ import annotations

import os
import time
from typing import Any

from mntui.sessions.node.proc import listens
from mntui.sessions.node.proc.proctree import STAT_LIMIT, parse_stat, read_bounded
from mntui.sessions.node.rules.termsafe import one_line
from mntui.sessions.node.wire.facts import Facts
from mntui.sessions.node.wire.nodewire import CMD_MAX, ENTRY_MAX, MAX_PORTS, MAX_PROCS, fit

EVERY = 2.0  # seconds between two snapshots (each costs the coordinator a check)
PORTS_EVERY = 2.0  # seconds between two reads of the ranks' listening ports
RESEND = 10.0  # seconds: an unchanged snapshot is sent again this often
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


class Builder:
    """One per sentinel: what it remembers between snapshots (ticks, command lines)."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.ticks: dict[int, tuple[int, int, float]] = {}  # pid -> (start, ticks, when)
        self.cmdlines: dict[tuple[int, int], str] = {}  # (pid, start) -> its command line
        self.listens = listens.Ports(proc)
        self.ports: list[int] = []
        self.ports_at = -PORTS_EVERY
        self.malformed = 0  # /proc lines of no shape we know: skipped
        self.last_cost_ms = 0.0
        try:
            self.ncpu: int | None = len(os.sched_getaffinity(0))  # as `nproc` counts
        except OSError:
            self.ncpu = os.cpu_count()

    def build(self, facts: Facts, now: float) -> dict[str, Any]:
        """The snapshot of the node now (`now` monotonic), from the sample's facts."""
        t0 = time.process_time()
        pids = sorted(p.pid for p in facts.live_procs)[:MAX_PROCS]
        procs = self._procs(pids, now)
        if now - self.ports_at >= PORTS_EVERY:
            self.ports_at = now
            held = [(pid, start) for pid, (start, _, _) in self.ticks.items()]
            self.ports = list(self.listens.of(held, now))[:MAX_PORTS]
        mem = self._meminfo()
        snap = {
            "procs": procs,
            "ports": self.ports,
            "load": self._load(),
            "ncpu": self.ncpu,
            "mem_total_mib": mem.get(b"MemTotal:"),
            "mem_available_mib": mem.get(b"MemAvailable:"),
            "node_time": round(time.time(), 3),
            "session": facts.session,
            "pane_dead": facts.pane_dead,
            "pane_pid": facts.pane_pid,
            "exit_code": facts.exit_code,
            "log_size": facts.log_size,
            "output_age": None if facts.output_age is None else round(facts.output_age, 1),
            "malformed": self.malformed,
        }
        self.last_cost_ms = (time.process_time() - t0) * 1000
        return snap

    def _procs(self, pids: list[int], now: float) -> list[dict[str, Any]]:
        out, ticks, cmds = [], {}, {}
        for pid in pids:
            raw = read_bounded(f"{self.proc}/{pid}/stat", STAT_LIMIT)
            line = parse_stat(pid, raw) if raw is not None else None
            if line is None:
                self.malformed += raw is not None
                continue  # gone since the sample
            p = line.proc
            before = self.ticks.get(pid)
            cpu = None
            if before is not None and before[0] == p.start and now > before[2]:
                cpu = round(100.0 * (p.ticks - before[1]) / _TICKS / (now - before[2]), 1)
            ticks[pid] = (p.start, p.ticks, now)
            key = (pid, p.start)
            cmd = self.cmdlines.get(key)
            cmds[key] = cmd = self._cmdline(pid) if cmd is None else cmd
            rss = round(p.rss_kb / 1024, 1)
            out.append(
                {"pid": pid, "ppid": p.ppid, "state": p.state, "cpu_percent": cpu,
                 "rss_mib": rss, "cmdline": cmd}
            )  # fmt: skip
        self.ticks, self.cmdlines = ticks, cmds  # the gone are forgotten
        return out

    def _cmdline(self, pid: int) -> str:
        raw = read_bounded(f"{self.proc}/{pid}/cmdline", CMD_MAX) or b""
        return one_line(raw.replace(b"\0", b" ").decode(errors="replace")).strip()

    def _load(self) -> list[float] | None:
        words = (read_bounded(f"{self.proc}/loadavg", 256) or b"").split()
        try:
            return [float(w) for w in words[:3]] if len(words) >= 3 else None
        except ValueError:
            self.malformed += 1
            return None

    def _meminfo(self) -> dict[bytes, float]:
        """MemTotal and MemAvailable in MiB (the file says kB)."""
        out = {}
        for row in (read_bounded(f"{self.proc}/meminfo", 16384) or b"").split(b"\n"):
            words = row.split()
            if len(words) == 3 and words[0] in (b"MemTotal:", b"MemAvailable:"):
                if words[1].isdigit() and len(words[1]) < 16:
                    out[words[0]] = round(int(words[1]) / 1024, 1)
                else:
                    self.malformed += 1
        return out


class Outbox:
    """What of the node's snapshot goes with a channel's next snap: one built every
    EVERY seconds, sent when it changed since this channel last sent one, or RESEND
    seconds after."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self.built_at = -EVERY
        self.sent: dict[str, Any] | None = None
        self.sent_at = -RESEND

    def fields(self, facts: Facts | None, now: float) -> dict[str, Any]:
        """`{"node": ...}` for the snap, or `{}`; `now` monotonic."""
        if facts is None or now - self.built_at < EVERY:
            return {}
        self.built_at = now
        snap = self.builder.build(facts, now)
        same = self.sent is not None and _same(self.sent, snap)
        if same and now - self.sent_at < RESEND:
            return {}
        self.sent, self.sent_at = snap, now
        snap, _ = fit({**snap, "age": 0.0}, ENTRY_MAX)
        return {"node": snap}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same but for the clock (a snapshot is news when anything else moved)."""
    return {**a, "node_time": None} == {**b, "node_time": None}
