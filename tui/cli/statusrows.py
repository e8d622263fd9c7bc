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


def aligned(head: Sequence[str], rows: Sequence[dict[str, str]]) -> list[str]:
    """The head and the rows, each column as wide as its widest cell; the last (free
    text, e.g. DETAIL) is not padded."""
    table = [tuple(head), *(tuple(r[h] for h in head) for r in rows)]
    widths = [max(len(t[i]) for t in table) for i in range(len(head) - 1)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(t[:-1], widths, strict=False)) + "  " + t[-1]
        for t in table
    ]
