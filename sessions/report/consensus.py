"""Which rank holds the others: the py-spy stacks of every rank, folded and compared.

In a hung job nearly every rank shows the same stack, waiting in one collective at one
line of the user's code; the rank that hangs the job is the odd one out: not in a
collective (stuck in data loading, a lock, a busy loop), in another collective (a
barrier while the others all-reduce), stopped, or on a node that gave no stack at all.
So identical stacks are folded ClusterShell-style ("ranks 0,2-7 (g[369,376-381])") and
the odd ones are named first. Pure: the stacks were taken elsewhere (stacks.py).

`waits_in` is the one test of "this stack waits in a collective": it lives in the node
package (node/rules/waits.py), where the cluster's sentinels sample with it too, so that
anything sampling stacks (a straggler detector, here or on the nodes) judges them alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ClusterShell.NodeSet import NodeSet, NodeSetException
from ClusterShell.RangeSet import RangeSet

from mntui.sessions.node.rules.waits import Wait, user_frame, waits_in

from .stacks import RankStack

__all__ = [
    "SUSPICION", "Consensus", "Group", "Role", "Wait", "consensus", "describe", "fold_nodes",
    "fold_ranks", "suspects", "user_frame", "waits_in", "who",
]  # fmt: skip


class Role(StrEnum):
    """What a rank is doing, from the others' point of view."""

    WAITING = "waiting"  # in the collective most ranks wait in
    MISMATCH = "mismatch"  # in another collective, or the same one called elsewhere
    OUTSIDE = "outside"  # not in a collective: the others wait for it
    STOPPED = "stopped"  # state T: SIGSTOP, a debugger
    NO_STACK = "no-stack"  # py-spy gave nothing for it
    MISSING = "missing"  # its node gave no stacks at all (unreachable, no py-spy)


# The order in which odd ones are named: the likeliest culprit first.
SUSPICION = (Role.STOPPED, Role.OUTSIDE, Role.MISMATCH, Role.MISSING, Role.NO_STACK)


@dataclass(frozen=True)
class Group:
    """Ranks with the same gist: the same role, collective or function, and line."""

    role: Role
    what: str  # "`all_reduce` (train.py:66)", "`next_batch` (data.py:41)"
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    detail: str = ""  # why no stack, for NO_STACK and MISSING

    @property
    def who(self) -> str:
        return who(self.ranks, self.nodes)


@dataclass(frozen=True)
class Consensus:
    groups: tuple[Group, ...]  # odd ones first (SUSPICION order), the waiting ones last
    headline: str  # "" when there were no stacks to compare

    @property
    def culprits(self) -> tuple[Group, ...]:
        return tuple(suspects(self.groups))

    def lines(self) -> list[str]:
        return [describe(g) for g in self.groups]


def fold_ranks(ranks: Iterable[int]) -> str:
    return str(RangeSet(sorted(set(ranks)))) if ranks else ""


def fold_nodes(nodes: Iterable[str]) -> str:
    names = sorted(set(nodes))
    try:
        return str(NodeSet.fromlist(names))
    except (NodeSetException, ValueError):  # a name ClusterShell cannot parse: list it
        return ",".join(names)


def who(ranks: Sequence[int], nodes: Sequence[str]) -> str:
    """`rank 1 (g375)`, `ranks 0,2-7 (g[369,376-381])`, or the node alone."""
    where = fold_nodes(nodes)
    if not ranks:
        return where
    head = "rank" if len(set(ranks)) == 1 else "ranks"
    return f"{head} {fold_ranks(ranks)} ({where})"


def _gist(s: RankStack) -> tuple[Role, str, str]:
    """(role before comparing, collective or function, line) of one rank's stack."""
    if s.state in ("T", "t"):
        inner = s.frames[0].name if s.frames else "?"
        call = user_frame(s.frames)
        return Role.STOPPED, inner, call.where if call else "?"
    if not s.frames:
        return Role.NO_STACK, "", s.error or "py-spy gave none"
    wait = waits_in(s.frames)
    if wait is not None:
        return Role.WAITING, wait.collective, wait.site
    call = user_frame(s.frames)
    return Role.OUTSIDE, s.frames[0].name, (call or s.frames[0]).where


def consensus(
    stacks: Sequence[RankStack],
    missing: Mapping[str, str] | None = None,
    expected: Mapping[str, Sequence[int]] | None = None,
    usual: frozenset[str] = frozenset(),
) -> Consensus:
    """Fold `stacks` by gist and name the odd ones out. `missing`: node -> why it gave no
    stacks; `expected`: node -> its global ranks, when known, so a missing node's ranks
    are named too; `usual`: lines whose collectives completed before (the Flight
    Recorder's history), which settle a tie between two collectives."""
    gists: dict[tuple[Role, str, str], list[RankStack]] = {}
    for s in sorted(stacks, key=lambda s: s.rank):
        gists.setdefault(_gist(s), []).append(s)
    main = _majority({k: len(v) for k, v in gists.items() if k[0] is Role.WAITING}, usual)
    groups = []
    for (role, name, site), members in gists.items():
        if role is Role.WAITING and (name, site) != main:
            role = Role.MISMATCH
        what = site if role is Role.NO_STACK else f"`{name}` ({site})"
        groups.append(Group(role, what, tuple(m.rank for m in members),
                            tuple(m.node for m in members)))  # fmt: skip
    for node, why in sorted((missing or {}).items()):
        ranks = tuple((expected or {}).get(node, ()))
        groups.append(Group(Role.MISSING, "", ranks, (node,), why))
    order = {r: i for i, r in enumerate((*SUSPICION, Role.WAITING))}
    groups.sort(key=lambda g: (order[g.role], -len(g.ranks), g.ranks[:1] or (1 << 30,)))
    return Consensus(tuple(groups), _headline(groups))


def _majority(
    sizes: Mapping[tuple[Role, str, str], int], usual: frozenset[str]
) -> tuple[str, str] | None:
    """The (collective, line) most ranks wait in; a tie goes to the one whose line ran
    collectives before (`usual`). An undecided tie has no majority: every side of it is
    then a mismatch."""
    if not sizes:
        return None
    ranked = sorted(sizes.items(), key=lambda kv: (kv[1], kv[0][2] in usual), reverse=True)
    if len(ranked) > 1:
        (_, a), (_, b) = ranked[0], ranked[1]
        if a == b and (ranked[0][0][2] in usual) == (ranked[1][0][2] in usual):
            return None
    (_, name, site), _ = ranked[0]
    return name, site


def suspects(groups: Sequence[Group]) -> list[Group]:
    """The groups that hold the others up. Ranks outside any collective are suspects only
    while someone waits in one: in a healthy job every rank is "outside"."""
    anyone_waits = any(g.role in (Role.WAITING, Role.MISMATCH) for g in groups)
    return [
        g for g in groups
        if g.role in (Role.STOPPED, Role.MISMATCH, Role.MISSING, Role.NO_STACK)
        or (g.role is Role.OUTSIDE and anyone_waits)
    ]  # fmt: skip


def describe(g: Group) -> str:
    if g.role is Role.WAITING:
        return f"{g.who} wait in {g.what}" if len(g.ranks) > 1 else f"{g.who} waits in {g.what}"
    if g.role is Role.MISMATCH:
        return f"{g.who} {_is(g)} in a different collective: {g.what}"
    if g.role is Role.OUTSIDE:
        return f"{g.who} {_is(g)} not in a collective: in {g.what}"
    if g.role is Role.STOPPED:
        return f"{g.who} {_is(g)} stopped (state T), in {g.what}"
    if g.role is Role.MISSING:
        return f"{g.who}: no stacks ({g.detail})"
    return f"{g.who}: no stack ({g.what})"


def _is(g: Group) -> str:
    return "is" if len(g.ranks) <= 1 else "are"


def _headline(groups: Sequence[Group]) -> str:
    """The likeliest culprit, then what the others do: "rank 1 (g375) is not in a
    collective: in `next_batch` (data.py:41); ranks 0,2-7 (g[369,376-381]) wait in
    `all_reduce` (train.py:66)"."""
    if not groups:
        return ""
    odd = suspects(groups)
    rest = [g for g in groups if g not in odd]
    if not odd:
        if rest[0].role is Role.WAITING and len(rest) == 1:
            return describe(rest[0]) + ": no rank stands out"
        doing = "; ".join(f"{g.who} in {g.what}" for g in rest[:2])
        tail = f"; {len(rest) - 2} more group(s) below" if len(rest) > 2 else ""
        return f"no rank waits in a collective: {doing}{tail}"
    if odd[0].role is Role.MISMATCH and not any(g.role is Role.WAITING for g in rest):
        sides = [g for g in odd if g.role is Role.MISMATCH]
        text = "; ".join(f"{g.who} in {g.what}" for g in sides[:3])
        return f"ranks wait in different collectives, none of them the usual one: {text}"
    parts = [describe(g) for g in (*odd[:2], *rest[:1])]
    more = len(odd) + len(rest) - len(parts)
    return "; ".join(parts) + (f"; {more} more group(s) below" if more > 0 else "")
