"""The rows of `mntui status`'s table, whoever watches the run.

Why a module: a run watched from here (views.py, from polls) and a run the cluster
watches (clusterstatus.py, from its sentinels' snapshots) show the same columns from the
same NodeSnapshot, made by the same cells (tui/cells.py); the cluster's adds who reports
(SENTINEL). Light enough for a cold status (quickstatus.py): no agent, no SSH.
"""

from __future__ import annotations

from collections.abc import Sequence

from mntui.sessions.poll import NodeProgress, NodeSnapshot, Verdict
from mntui.tui import cells

HEAD = ("NODE", "RANK", "STATE", "GPUS", "PROCS", "PORTS", "OUTPUT", "STEP", "RTT")


def cells_of(
    node: str, rank: int, s: NodeSnapshot, v: Verdict, p: NodeProgress | None
) -> dict[str, str]:
    """The HEAD cells of one node, by column."""
    return {
        "NODE": node,
        "RANK": str(rank),
        "STATE": v.state.value,
        "GPUS": cells.gpu_summary(s),
        "PROCS": str(len(s.live_procs)) if s.reachable else "-",
        "PORTS": ",".join(map(str, s.ports)) or "-",
        "OUTPUT": cells.age(s.output_age),
        "STEP": cells.step(p, v.state),
        "RTT": cells.rtt(s),
    }


# the columns a narrow terminal loses first, in this order (issue 38: `status` was ~150
# columns at COLUMNS=80); NODE, RANK, STATE, GPUS, STEP and the free text always stay
DROPPED_FIRST = ("RTT", "PORTS", "OUTPUT", "PROCS", "SENTINEL")
LEAST_TEXT = 20  # the free text's columns kept before another column goes


def aligned(
    head: Sequence[str], rows: Sequence[dict[str, str]], width: int | None = None
) -> list[str]:
    """The head and the rows, each column as wide as its widest cell; the last (free
    text, e.g. DETAIL) is not padded. `width`: the terminal's columns (None: no limit,
    as in a pipe): columns go (DROPPED_FIRST) until the free text has LEAST_TEXT of
    them, and the free text is cut to what is left."""
    head = list(head)
    while width is not None and _width(head, rows) + LEAST_TEXT > width:
        gone = next((h for h in DROPPED_FIRST if h in head), None)
        if gone is None:
            break
        head.remove(gone)
    table = [tuple(head), *(tuple(r[h] for h in head) for r in rows)]
    widths = [max(len(t[i]) for t in table) for i in range(len(head) - 1)]
    room = None if width is None else max(LEAST_TEXT, width - _width(head, rows))
    out = []
    for t in table:
        cols = "  ".join(c.ljust(w) for c, w in zip(t[:-1], widths, strict=False))
        out.append(f"{cols}  {_cut(t[-1], room)}")
    return out


def _width(head: Sequence[str], rows: Sequence[dict[str, str]]) -> int:
    """The columns before the free text, their gaps included."""
    return sum(max([len(h), *(len(r[h]) for r in rows)]) + 2 for h in head[:-1])


def _cut(text: str, room: int | None) -> str:
    return text if room is None or len(text) <= room else text[: room - 1] + "…"


def terminal_width() -> int | None:
    """The columns `status` fits its table to on a terminal (COLUMNS when set, else the
    terminal's own); None in a pipe, whatever COLUMNS says: a script reads every column."""
    import shutil
    import sys

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None
