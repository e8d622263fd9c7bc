"""Where the cluster's next attempt runs: the node of each rank, once a repeat culprit
or a quarantined node is swapped for a spare.

Why a rule of its own on the node side: the coordinator places a restart while this
machine may be away, with the supervisor's rules (restarts.repeat_culprit: a node that
caused two teardowns in a row; the first free spare in the config's order takes its
rank, the others keep theirs) and `restart.quarantine_after` counted within the chain
(a node that caused `count` failures within `within` is used no more). What it cannot
do that the supervisor can: replace the main, since the coordinator runs there (the
chain ends and says so, handed to the spare that succeeds the main: succession.py,
which places with `here`; without one, a launch from this machine routes a spare in),
and swap in a spare whose sentinel is not connected (nothing could start its part) or
that runs another number of processes (the job's world size would change).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .restarts import AttemptEnd, repeat_culprit

SAID_SPARES = 3  # spares named in a line saying why none could take a rank
MAIN_HERE = "only this machine can replace it"  # the words of a stop with `main_here`
RESTART_HERE = "`mntui launch --restart` puts a spare in its place; the coordinator runs on it"


@dataclass(frozen=True)
class QuarantineRule:
    """`restart.quarantine_after`, as the watch file carries it (seconds)."""

    count: int
    within: float
    hold: float  # the manager's quarantine of the node, from the failure on


@dataclass(frozen=True)
class Failure:
    node: str  # the attempt's culprit
    at: float  # wall clock: when its attempt ended


@dataclass(frozen=True)
class Placement:
    layout: tuple[str, ...]  # the next attempt's node of each rank, the main first
    said: tuple[str, ...] = ()  # each swap (or a swap that could not be), one line each
    stop: str | None = None  # why the chain cannot go on here (None: it can)
    main_here: bool = False  # the stop is a main the coordinator cannot replace itself
    main_why: str | None = None  # that main's fault: "broke twice in a row", "is quarantined"


def span(seconds: float) -> str:
    """`24h`, `90m`, `45s`: a window in the words the config takes."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def past_quarantine(
    failures: Sequence[Failure], rule: QuarantineRule | None, now: float
) -> dict[str, int]:
    """Each node that caused `rule.count` failures within `rule.within` of `now`, and
    how many; nothing without a rule."""
    if rule is None:
        return {}
    caused: dict[str, int] = {}
    for f in failures:
        if f.at >= now - rule.within:
            caused[f.node] = caused.get(f.node, 0) + 1
    return {n: c for n, c in caused.items() if c >= rule.count}


class Window(Protocol):
    """A quarantine rule's window: the coordinator's QuarantineRule and the manager's
    config (QuarantineAfter) alike."""

    @property
    def within(self) -> float: ...


def quarantine_why(caused: int, rule: Window) -> str:
    """The reason a quarantine carries, whoever counted it (the coordinator here, the
    supervisor through history/policy.py): one event reads the same in `mntui
    quarantine` either way, its window in the words the config takes."""
    return f"caused {caused} failures within {span(rule.within)} (restart.quarantine_after)"


def place(
    layout: Sequence[str],
    history: Sequence[AttemptEnd],
    out: Collection[str],
    spares: Sequence[str],
    ready: Collection[str],
    nprocs: Mapping[str, int],
    here: bool = False,
    lost: Collection[str] = (),
) -> Placement:
    """The next attempt's nodes after the attempt on `layout` ended as `history` says.
    `out`: the nodes quarantined in this chain (never used again, spares included);
    `spares`: the config's, in its order; `ready`: the nodes whose sentinels are
    connected; `nprocs`: each node's processes. `here`: placed by a successor of the
    main (succession.py) or this machine's launch, which may replace the main too;
    `lost`: nodes gone for good."""
    culprit = repeat_culprit(history) if spares else None
    whys = {n: "is quarantined" for n in layout if n in out}
    whys.update({n: "is lost" for n in layout if n in lost})
    out = {*out, *lost}
    if culprit is not None and culprit in layout and culprit not in whys:
        whys[culprit] = "broke twice in a row"
    new, said = list(layout), list[str]()
    for rank, node in enumerate(layout):
        why = whys.get(node)
        if why is None:
            continue
        if rank == 0 and not here:
            first = f"`mntui quarantine {node}`, then " if why == "broke twice in a row" else ""
            stop = f"the main {node} {why}: {MAIN_HERE} ({first}{RESTART_HERE})"
            return Placement(tuple(layout), tuple(said), stop, main_here=True, main_why=why)
        fits = [
            s for s in spares if _free(s, new, out, ready) and nprocs.get(s) == nprocs.get(node)
        ]
        if fits:
            new[rank] = fits[0]
            said.append(f"{node} {why}: replaced by spare {fits[0]} (rank {rank})")
            continue
        none = f"no spare can take rank {rank}" + _why_not(spares, node, new, out, ready, nprocs)
        if node in out:
            return Placement(tuple(layout), tuple(said), f"{node} {why} and {none}")
        said.append(f"{node} {why}, but {none}: it keeps rank {rank}")
    return Placement(tuple(new), tuple(said))


def _free(spare: str, layout: Sequence[str], out: Collection[str], ready: Collection[str]) -> bool:
    return spare not in layout and spare not in out and spare in ready


def _why_not(
    spares: Sequence[str],
    node: str,
    layout: Sequence[str],
    out: Collection[str],
    ready: Collection[str],
    nprocs: Mapping[str, int],
) -> str:
    """` (g390: in use; g391: its sentinel is not connected)`: bounded, one line."""
    parts = []
    for s in spares:
        if s in layout:
            parts.append(f"{s}: in use")
        elif s in out:
            parts.append(f"{s}: quarantined")
        elif s not in ready:
            parts.append(f"{s}: its sentinel is not connected")
        elif nprocs.get(s) != nprocs.get(node):
            parts.append(f"{s}: runs {nprocs.get(s)} process(es), not {nprocs.get(node)}")
    if not parts:
        return " (the config lists none)"
    more = f"; {len(parts) - SAID_SPARES} more" if len(parts) > SAID_SPARES else ""
    return f" ({'; '.join(parts[:SAID_SPARES])}{more})"
