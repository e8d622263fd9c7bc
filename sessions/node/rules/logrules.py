"""The table of what a training log's errors look like, and what each one means.

Each rule names plain substrings (checked first: cheap on hostile logs), the regex
that confirms them, the cause, whether it is only a consequence of another rank's
failure (`secondary`), and the one-line summary shown to a person. The first rule
that matches wins, so the more specific texts come first. `classify` applies them.

A job that cannot start (a mistyped script, a module not installed, a syntax error)
prints python's own line for it first; torchrun's "worker failed with exitcode 2" that
follows says less. Those lines are rules here, so the earlier line is the finding.
Some causes are the job's own mistake, the same on whichever node ran it (`MISTAKES`):
a report carries that, and the node history does not count them against the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["MISTAKES", "RULES", "Cause", "Finding", "Rule"]


class Cause(str, Enum):
    """(str, Enum), not StrEnum: the node package runs on Python 3.9 (rules.py says how
    `__str__` keeps it reading as its value)."""

    CUDA_OOM = "cuda-oom"
    NCCL_ERROR = "nccl-error"
    NCCL_TIMEOUT = "nccl-timeout"
    NCCL_REMOTE = "nccl-remote-exited"
    GLOO_CONNECTION = "gloo-connection"
    RENDEZVOUS = "rendezvous"
    ADDRESS_IN_USE = "address-in-use"
    SEGFAULT = "segfault"
    FATAL_PYTHON = "fatal-python-error"
    KILLED_OOM = "killed-oom"
    SIGNAL = "signal"
    TRACEBACK = "python-exception"
    STARTUP = "startup-error"  # python could not start the job: file, module, syntax

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


# The job's own mistakes (its command, its environment, its ports), not the node's.
MISTAKES = frozenset({Cause.STARTUP, Cause.ADDRESS_IN_USE})


@dataclass(frozen=True)
class Finding:
    cause: Cause
    summary: str  # one line for a person
    exception: str | None  # as the log spells it, e.g. "torch.OutOfMemoryError"
    message: str | None  # the first line of the message, capped
    location: str | None  # "file:line" of the newest frame in the user's own code
    line: int  # 0-based index of the input line where the evidence starts
    rank: int | None  # from "[rank1]:", "[default1]:", "[Rank 1]" or torchrun's table
    secondary: bool  # a consequence of another rank's failure, not a cause
    mistake: bool = False  # the cause is one of MISTAKES: never the node's failure


@dataclass(frozen=True)
class Rule:
    """A known failure text.

    `needles` are plain substrings of which the text must hold one: `str` search is far
    faster than a regex, and 20,000 hostile 4,000-char lines must not stall the TUI. `pattern`
    then decides (by default: any needle); `detail` only extracts groups for `summary`, whose
    `{group}`s are filled and whose `[parts]` are dropped when their groups did not match.
    """

    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    cause: Cause
    secondary: bool
    summary: str
    detail: re.Pattern[str] | None = None


def _rule(
    needles: str, cause: Cause, secondary: bool, summary: str, detail: str = "", pattern: str = ""
) -> Rule:
    words = tuple(needles.split("|"))
    regex = re.compile(pattern or "|".join(map(re.escape, words)))
    return Rule(words, regex, cause, secondary, summary, re.compile(detail) if detail else None)


# The first rule that matches wins, so the more specific texts come first.
RULES: tuple[Rule, ...] = (
    _rule("CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", Cause.CUDA_OOM, False,
          "CUDA out of memory[, tried to allocate {size}]",
          detail=r"Tried to allocate (?P<size>[\d.]+ ?[KMGTPE]?i?B)"),
    _rule("Out of memory: Kill|Memory cgroup out of memory: Kill", Cause.KILLED_OOM, False,
          "kernel OOM killer killed {comm} (pid {pid})",
          detail=r"process (?P<pid>\d+) \((?P<comm>[^)]*)\)"),
    # Not on warnings: torch warns once per address family, NCCL on harmless probes.
    _rule("EADDRINUSE|ddress already in use|failed to listen on any local network",
          Cause.ADDRESS_IN_USE, False, "address already in use[ (port {port})]",
          detail=r"(?:port: |\]:)(?P<port>\d+)", pattern=r"^(?!.*(?:NCCL WARN|\[W[\d ]))"),
    _rule("Watchdog caught collective operation timeout", Cause.NCCL_TIMEOUT, True,
          "NCCL collective[ {op}] timed out[ after {ms} ms]",
          detail=r"OpType=(?P<op>\w+)(?:.*? ran for (?P<ms>\d+) milliseconds)?"),
    _rule("remote process exited|ncclRemoteError|Connection closed by remote peer",
          Cause.NCCL_REMOTE, True, "NCCL peer exited or the network failed"),
    _rule("NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage"
          "|ncclInvalidArgument|DistBackendError:", Cause.NCCL_ERROR, False, "NCCL error[: {what}]",
          detail=r"(?P<what>unhandled \w+ error|invalid usage|internal error)"),
    _rule("Connection closed by peer|Connection reset by peer|Timed out waiting",
          Cause.GLOO_CONNECTION, True, "gloo: connection to a peer lost[ ({how})]",
          detail=r"(?P<how>closed|reset|Timed out)", pattern="gloo"),
    _rule("RendezvousClosedError", Cause.RENDEZVOUS, True, "rendezvous closed by another node"),
    _rule("RendezvousTimeoutError", Cause.RENDEZVOUS, False,
          "rendezvous timed out: not all nodes joined"),
    _rule("RendezvousConnectionError|DistStoreError|client socket has timed out after",
          Cause.RENDEZVOUS, False, "cannot reach the rendezvous store"),
    _rule("elastic.rendezvous|Rendezvous", Cause.RENDEZVOUS, False, "rendezvous failed",
          pattern=r"elastic\.rendezvous|Rendezvous\w*Error"),
    _rule("Segmentation fault|SIGSEGV|exitcode: -11)", Cause.SEGFAULT, False,
          "segmentation fault"),
    _rule("Fatal Python error: ", Cause.FATAL_PYTHON, False, "fatal Python error: {what}",
          detail=r"Fatal Python error: (?P<what>.+)"),
    # torchrun's handler for a SIGTERM, SIGHUP or SIGINT sent to it (a teardown, a closed
    # session, Ctrl+C): `got signal: 15` on Python >= 3.11, `Signals.SIGTERM` before.
    _rule("got signal: ", Cause.SIGNAL, True, "torchrun stopped by {sig} (from outside the job)",
          pattern=r"got signal: (?:Signals\.)?(?P<sig>SIG(?:TERM|HUP|INT)\b|(?:15|1|2)(?![0-9]))"),
    _rule("Signal 15 (SIGTERM) received|exitcode: -15)|Signals.SIGTERM|closing signal SIGTERM",
          Cause.SIGNAL, True, "terminated by SIGTERM (stopped by the launcher)"),
    _rule("received by PID|failed (exitcode: -|<Signals.SIG|killed by signal|return code = -"
          "|got signal: ", Cause.SIGNAL, False, "killed by a signal[ ({sig})]",
          detail=r"(?P<sig>SIG[A-Z]+|(?<=exitcode: )-\d+|(?<=signal: )\w+|(?<== )-\d+)"),
    # python's own startup errors, each a line of the interpreter's (`/venv/bin/python3:`)
    # or an exception line: never a mention of one inside some other line.
    _rule("can't open file", Cause.STARTUP, False, "{what}",
          pattern=r"^(?:\S*/)?(?P<what>python[\w.]*: can't open file .{1,240})"),
    _rule("No module named", Cause.STARTUP, False, "No module named {module}",
          pattern=r"^(?:(?:\S*/)?python[\w.]*: .{0,240}?|ModuleNotFoundError: )No module named "
          r"(?P<module>'[^']{1,200}'|[\w.]{1,200})"),
    _rule("SyntaxError: |IndentationError: |TabError: ", Cause.STARTUP, False, "{exc}: {msg}",
          pattern=r"^(?P<exc>SyntaxError|IndentationError|TabError): (?P<msg>.{1,240})"),
)  # fmt: skip
ANY_NEEDLE = re.compile("|".join(re.escape(n) for rule in RULES for n in rule.needles))
