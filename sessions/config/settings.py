"""The parts of a job: a node, and the policy sections for launching, killing, SSH,
watching, restarting and syncing.

Each setting is declared once, on its dataclass field: its default, and in the field's
metadata the check that reads it from YAML (checks, jobchecks). The allowed keys of
every mapping are the fields that carry a check, so a new setting is one new field. The
SSH, watch and restart code needs these and not the loader, so they live apart from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from mntui.sessions.node.rules.states import AUTO_FLOOR, AUTO_STEPS, AUTO_UNKNOWN, stall_threshold

from . import checks as ck
from . import jobchecks as jc
from .spans import parse_span
from .yamlmarks import Document, Path_

# The stall rule's numbers live with the rule (node/rules/states.py), re-exported: config's
# readers (the judge's text, the tests) keep taking them from here.
__all__ = ["AUTO_FLOOR", "AUTO_STEPS", "AUTO_UNKNOWN"]

# Hosts that run through a local runner, without SSH.
LOCAL_HOSTS = frozenset({"local", "localhost"})
MAX_NPROC = 1024
HOUR = 3600.0
DAY = 86400.0


class ReadyMode(StrEnum):
    PORT = "port"  # the master port listens on the main node
    LOG = "log"  # a regex matches the main's output
    DELAY = "delay"  # a fixed wait: the last resort of the seed scripts


class HostKeyPolicy(StrEnum):
    STRICT = "strict"  # unknown or changed key: refuse
    ACCEPT_NEW = "accept-new"  # unknown key: record it; changed key: refuse


class Action(StrEnum):
    KILL_ALL = "kill_all"  # tear the whole job down
    NOTIFY = "notify"  # report, touch nothing


class WatchWhere(StrEnum):
    AUTO = "auto"  # the cluster's watch (the default; the same as `cluster` since issue 37)
    HERE = "here"  # the manager's watchdog: this machine must stay on and connected
    CLUSTER = "cluster"  # sentinels on the nodes and a coordinator on the main (issue 30)


class SshTransport(StrEnum):
    PARAMIKO = "paramiko"  # in-process, one connection per node
    OPENSSH = "openssh"  # the system `ssh` per node, behind a private ControlMaster


class PasswordMode(StrEnum):
    PROMPT = "prompt"  # paramiko: asked once, kept in memory, used for every node


@dataclass(frozen=True)
class NodeSpec:
    # `shared`: also a top-level key, the default of every node; `merge`: a node's own
    # mapping adds to the top-level one instead of replacing it.
    name: str = field(metadata=ck.meta(ck.text))
    host: str = field(metadata=ck.meta(ck.text))  # default: the node's name
    rank: int  # the main is 0, the others in listed order
    command: str = field(metadata=ck.meta(jc.template, shared=True, required=True))
    env: Mapping[str, str] = field(
        default_factory=dict, metadata=ck.meta(jc.env, shared=True, merge=True)
    )
    setup: tuple[str, ...] = field(default=(), metadata=ck.meta(ck.lines, shared=True))
    workdir: str | None = field(default=None, metadata=ck.meta(jc.workdir, shared=True))
    # this node's processes (a hostfile's `slots=N`); None: the job's nproc_per_node
    nproc_per_node: int | None = field(default=None, metadata=ck.meta(ck.count(MAX_NPROC)))

    @property
    def is_local(self) -> bool:
        return self.host in LOCAL_HOSTS


@dataclass(frozen=True)
class LaunchPolicy:
    ready: ReadyMode = field(default=ReadyMode.PORT, metadata=ck.meta(ck.choice(ReadyMode)))
    # grep -E, on the main's output
    ready_pattern: str | None = field(default=None, metadata=ck.meta(jc.pattern))
    ready_delay: float = field(default=10.0, metadata=ck.meta(ck.seconds(maximum=DAY)))
    ready_timeout: float = field(
        default=300.0, metadata=ck.meta(ck.seconds(positive=True, maximum=DAY))
    )
    stagger: float = field(default=0.0, metadata=ck.meta(ck.seconds(maximum=HOUR)))


@dataclass(frozen=True)
class KillPolicy:
    # between SIGTERM and SIGKILL
    grace: float = field(default=5.0, metadata=ck.meta(ck.seconds(maximum=HOUR)))


@dataclass(frozen=True)
class SshPolicy:
    config: str | None = field(default=None, metadata=ck.meta(ck.text))
    connect_timeout: float = field(
        default=10.0, metadata=ck.meta(ck.seconds(positive=True, maximum=HOUR))
    )
    # None: follow ssh_config's StrictHostKeyChecking
    host_key: HostKeyPolicy | None = field(default=None, metadata=ck.meta(ck.choice(HostKeyPolicy)))
    command_timeout: float = field(
        default=60.0, metadata=ck.meta(ck.seconds(positive=True, maximum=DAY))
    )
    transport: SshTransport = field(
        default=SshTransport.PARAMIKO, metadata=ck.meta(ck.choice(SshTransport))
    )
    # None: keys and the agent only
    password: PasswordMode | None = field(default=None, metadata=ck.meta(ck.choice(PasswordMode)))


@dataclass(frozen=True)
class WatchPolicy:
    # a node failed, orphaned, froze or stayed unreachable
    on_failure: Action = field(default=Action.KILL_ALL, metadata=ck.meta(ck.choice(Action)))
    on_stall: Action = field(default=Action.NOTIFY, metadata=ck.meta(ck.choice(Action)))
    # seconds without output, or `auto`: learnt from the job's steps (stall_threshold)
    stall_after: float | Literal["auto"] = field(
        default=300.0, metadata=ck.meta(ck.seconds_or_auto(maximum=DAY))
    )
    # a stop this short is a debugger (py-spy), not a hang
    frozen_after: float = field(default=3.0, metadata=ck.meta(ck.seconds(maximum=DAY)))
    # a node can miss polls while its sshd is busy
    unreachable_after: float = field(default=30.0, metadata=ck.meta(ck.seconds(maximum=DAY)))
    # seconds between polls; below 0.1 the polls would pile up
    interval: float = field(
        default=1.0, metadata=ck.meta(ck.seconds(positive=True, maximum=HOUR, floor=0.1))
    )
    # seconds for py-spy stacks of every rank before a hang's teardown; 0: none
    capture_budget: float = field(default=10.0, metadata=ck.meta(ck.seconds(maximum=600)))
    # a node below this fraction of the median step rate for slow_after is "slow"
    slow_fraction: float = field(default=0.5, metadata=ck.meta(ck.fraction))
    slow_after: float = field(
        default=120.0, metadata=ck.meta(ck.seconds(positive=True, maximum=DAY))
    )
    # seconds between py-spy samples of every rank, for the straggler; 0: none (on the
    # cluster: a py-spy record per rank every 10 s, at least a sample a second)
    sample_every: float = field(default=0.25, metadata=ck.meta(ck.seconds(maximum=HOUR)))
    # a straggler named by the samples: tell (notify), or take the job down (kill_all)
    on_slow: Action = field(default=Action.NOTIFY, metadata=ck.meta(ck.choice(Action)))
    # where the watch runs: `auto`/`cluster` keeps guarding the job while this machine
    # sleeps (a node no interpreter can run a sentinel on is refused at launch)
    where: WatchWhere = field(default=WatchWhere.AUTO, metadata=ck.meta(ck.choice(WatchWhere)))
    # the coordinator's port on the main node (`cluster`); None: master_port + 1
    port: int | None = field(default=None, metadata=ck.meta(ck.port))
    # seconds between a sentinel's samples of its node's processes (`cluster`)
    node_interval: float = field(
        default=0.5, metadata=ck.meta(ck.seconds(positive=True, maximum=60, floor=0.05))
    )

    def stall_threshold(self, step: float | None = None, longest: float | None = None) -> float:
        """Seconds without output that make a stall: the rule of node/rules/states.py (the
        coordinator on the main node learns the same threshold)."""
        return stall_threshold(self.stall_after, step, longest)


RESTARTABLE = ("failed", "orphaned", "frozen", "unreachable", "stalled")
# argparse's usage error, launch.sh's failed `cd`, "not executable", "not found":
# relaunching the same command cannot fix them.
USAGE_EXIT_CODES = frozenset({2, 97, 126, 127})


@dataclass(frozen=True)
class QuarantineAfter:
    """`restart.quarantine_after`: a node that caused `count` failures within `within`
    seconds is quarantined for `hold` seconds (YAML `for`, a Python keyword)."""

    count: int
    within: float = DAY
    hold: float = DAY


def _span(doc: Document, value: Any, path: Path_) -> float:
    try:
        return parse_span(value)
    except ValueError as exc:
        raise doc.error(path, str(exc)) from None


def _quarantine_after(doc: Document, value: Any, path: Path_) -> QuarantineAfter:
    m = ck.mapping(doc, value, path, {"count", "within", "for"})
    if m.get("count") is None:
        raise doc.error((*path, "count"), "required: the failures that quarantine a node")
    count = ck.whole(1, 1000)(doc, m["count"], (*path, "count"))
    spans = {k: _span(doc, m[k], (*path, k)) for k in ("within", "for") if m.get(k) is not None}
    return QuarantineAfter(count, spans.get("within", DAY), spans.get("for", DAY))


@dataclass(frozen=True)
class RestartPolicy:
    max: int = field(default=0, metadata=ck.meta(ck.whole(0, 1000)))  # 0: never restart
    # the first delay; it doubles up to backoff_max
    backoff: float = field(default=10.0, metadata=ck.meta(ck.seconds(maximum=DAY)))
    backoff_max: float = field(default=300.0, metadata=ck.meta(ck.seconds(maximum=DAY)))
    on: frozenset[str] = field(
        default=frozenset(RESTARTABLE) - {"stalled"}, metadata=ck.meta(ck.names_of(RESTARTABLE))
    )
    # restart only on these codes (None: any but not_on)
    exit_codes: frozenset[int] | None = field(
        default=None, metadata=ck.meta(ck.exit_codes(zero=False))
    )
    not_on: frozenset[int] = field(
        default=USAGE_EXIT_CODES, metadata=ck.meta(ck.exit_codes(zero=True))
    )
    # an attempt that made progress this long forgets earlier failures; 0: never
    reset_after: float = field(default=1800.0, metadata=ck.meta(ck.seconds(maximum=30 * DAY)))
    # {count: N, within: 24h, for: 24h}: quarantine a node that caused N failures; None: off
    quarantine_after: QuarantineAfter | None = field(
        default=None, metadata=ck.meta(_quarantine_after)
    )


class GitCheckout(StrEnum):
    SAME_COMMIT = "same-commit"  # every node's clone detached at the local HEAD's commit


@dataclass(frozen=True)
class GitSync:
    checkout: GitCheckout = field(
        default=GitCheckout.SAME_COMMIT, metadata=ck.meta(ck.choice(GitCheckout))
    )
    # also `git push <this> HEAD` (the current branch) before the nodes: the run's commit
    # is then published too; None: the commit goes to the nodes only
    push: str | None = field(default=None, metadata=ck.meta(jc.git_remote))
    # sync HEAD although the local tree has uncommitted changes (they stay behind)
    allow_dirty: bool = field(default=False, metadata=ck.meta(ck.flag))


@dataclass(frozen=True)
class SyncPolicy:
    # rsync mode: a local directory copied into every node's workdir before a launch;
    # git mode: a directory of the local repository whose HEAD every node checks out
    source: str = field(default=".", metadata=ck.meta(ck.text))  # relative to the config
    # rsync patterns
    excludes: tuple[str, ...] = field(default=(), metadata=ck.meta(ck.lines, rsync=True))
    # honour .gitignore files
    gitignore: bool = field(default=True, metadata=ck.meta(ck.flag, rsync=True))
    # remove what the source lacks from the workdir (excluded files stay)
    delete: bool = field(default=False, metadata=ck.meta(ck.flag, rsync=True))
    # git mode instead of rsync: see sessions/sync/gitsync.py
    git: GitSync | None = field(default=None, metadata=ck.meta(ck.section(GitSync)))
