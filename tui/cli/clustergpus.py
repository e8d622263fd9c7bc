"""Each node's GPUs in the status of a run the cluster watches, as its sentinel read them.

Why: such a run's nodes are not polled, so its status shows what the sentinels read
(node/sentinel/gpus.py) and the coordinator kept on its board (coord/gpus.json), parsed here by
the one parser a poll's reading goes through (poll/gpu.py parse_reading), with the
sentinel's PIDs marking the job's own processes, and shown with the cell a here-watched
run's status shows (tui/cells.py gpu_cell). A reading older than STALE seconds on the
main's clock (its sentinel gone quiet) is no reading: `-`, as an unreachable node's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mntui.sessions.termsafe import one_line

if TYPE_CHECKING:
    from mntui.sessions.launch import BoardView
    from mntui.sessions.poll.gpu import GpuReading

STALE = 30.0  # seconds: past a sentinel's resend (node/sentinel/gpus.py RESEND) and a read's budget


@dataclass(frozen=True)
class NodeGpus:
    reading: GpuReading | None  # None: no nvidia-smi, or no fresh reading
    cell: str  # the GPUS column

    def as_json(self) -> dict[str, Any] | None:
        """The `gpu` of a node in `status --json`, as a polled snapshot has it."""
        return asdict(self.reading) if self.reading is not None else None


NO_READING = NodeGpus(None, "-")


def node_gpus(view: BoardView, nodes: list[str]) -> dict[str, NodeGpus]:
    """Each node's GPUs; the parser and the cells are loaded only when there are GPUs
    to show (a cold status of a run without any pays nothing for them)."""
    out = {}
    for node in nodes:
        t = view.gpus.get(node)
        if t is None or view.now is None or view.now - t.read_at > STALE:
            out[node] = NO_READING
        elif t.csv is None:
            out[node] = NodeGpus(None, "no GPU")
        else:
            from mntui.sessions.poll.gpu import parse_reading
            from mntui.tui.cells import gpu_cell

            reading = parse_reading(t.csv, t.apps, frozenset(t.own))
            out[node] = NodeGpus(reading, one_line(gpu_cell(reading)))
    return out


def malformed_line(view: BoardView) -> list[str]:
    """What the board held that was not a reading of ours: counted, never shown."""
    n = view.gpus_malformed
    return [f"GPU readings on the coordinator's board: {n} malformed, ignored"] if n else []
