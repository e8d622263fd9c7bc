"""The ranks of an attempt's nodes as the app's stream reads them from the board.

Why a rule of its own: each status row says its rank (node/board/coordfiles.py); status.json's
keys are sorted, so a row's place says nothing (node10 comes before node2), and a spare
the coordinator swapped in is in no record here. Ranks are node data: believed only when
they are one each of 0..n-1, else the record's stand in, and the rest take the lowest
free ones: never one rank twice on screen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def attempt_ranks(rows: Mapping[str, Any], recorded: Mapping[str, int]) -> dict[str, int]:
    said = [r.get("rank") if isinstance(r, dict) else None for r in rows.values()]
    ranks = [x for x in said if type(x) is int]
    if len(ranks) == len(rows) and sorted(ranks) == list(range(len(rows))):
        return dict(zip(rows, ranks, strict=True))
    return _fallback(list(rows), recorded)


def _fallback(nodes: list[str], recorded: Mapping[str, int]) -> dict[str, int]:
    taken: set[int] = set()
    out: dict[str, int] = {}
    for n in nodes:
        r = recorded.get(n)
        if r is not None and r not in taken:
            out[n] = r
            taken.add(r)
    free = (r for r in range(len(nodes) + len(recorded)) if r not in taken)
    return {n: out[n] if n in out else next(free) for n in nodes}
