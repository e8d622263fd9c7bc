"""The conclusion a hang report leads with: who holds the job, from the ranks' stacks
(consensus.py) and their Flight Recorder dumps (flightrec.py).

The stacks say what each rank does now; the dumps say which collective each reached.
Either can be missing (no py-spy, ptrace refused, a stopped rank that cannot dump, a
node out of reach), so each is used alone when the other has nothing, and the report
says where they agree. A node the judge found unreachable is the culprit whatever
the other ranks show: nothing else can be learnt from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mntui.sessions.poll import NodeState

from .consensus import Consensus, consensus, describe, who
from .flightrec import Reading
from .stacks import RankStack


@dataclass(frozen=True)
class Suspect:
    """One culprit as the conclusion names it: its ranks (none known: a node only)."""

    role: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Conclusion:
    headline: str
    stacks: tuple[str, ...]  # the folded stacks, odd ones first
    flight: tuple[str, ...]  # what the Flight Recorder dumps say
    culprits: tuple[Suspect, ...]  # the likeliest first; () when nobody stands out


def conclude(
    trigger: tuple[str, NodeState, str] | None,
    stacks: Sequence[RankStack],
    missing: Mapping[str, str],
    ranks_of: Mapping[str, Sequence[int]],
    flight: Reading | None,
) -> Conclusion | None:
    """None when there is nothing to conclude from (no stacks, no dumps)."""
    usual = flight.usual if flight is not None else frozenset()
    cons = consensus(stacks, missing, ranks_of, usual) if stacks or missing else None
    fr_lines = flight.findings if flight is not None else ()
    if trigger is not None and trigger[1] is NodeState.UNREACHABLE:
        node = trigger[0]
        ranks = tuple(ranks_of.get(node, ()))
        head = f"{who(ranks, [node])} became unreachable ({trigger[2]}): no stack from it"
        rest = [g for g in cons.groups if node not in g.nodes] if cons else []
        if rest:
            head += f"; {describe(rest[0])}"
        return Conclusion(head, _lines(cons), fr_lines, (Suspect("unreachable", ranks, (node,)),))
    if cons is not None and cons.culprits:
        first = cons.culprits[0]
        head = cons.headline + _agrees(first.ranks, flight)
        return Conclusion(head, _lines(cons), fr_lines,
                          (Suspect(first.role.value, first.ranks, first.nodes),))  # fmt: skip
    if flight is not None and flight.culprits:
        nodes = tuple(d.node for d in flight.dumps if d.rank in flight.culprits)
        suspect = Suspect("flight-recorder", flight.culprits, nodes)
        head = flight.findings[0] if flight.findings else ""
        return Conclusion(head, _lines(cons), fr_lines, (suspect,))
    if cons is not None and cons.headline:
        hint = " (a peer outside the job, or the network?)" if trigger and not fr_lines else ""
        return Conclusion(cons.headline + hint, _lines(cons), fr_lines, ())
    if fr_lines:
        return Conclusion(fr_lines[0], (), fr_lines, ())
    return None


def _lines(cons: Consensus | None) -> tuple[str, ...]:
    return tuple(cons.lines()) if cons is not None else ()


def _agrees(ranks: Sequence[int], flight: Reading | None) -> str:
    """ " (the Flight Recorder agrees: …)" when the dumps name the same ranks."""
    if flight is None or not flight.culprits or not flight.findings:
        return ""
    if set(flight.culprits) == set(ranks):
        return "; the Flight Recorder agrees"
    return ""
