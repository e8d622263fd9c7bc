"""How many GPUs a job held on a node: the one rule the manager's watchdog (through
history/stepclock.py) and the cluster's coordinator (coordstate.py) both count by.

Why one module, on the node side: the ledger prices an attempt in GPU-hours from what
either watch wrote, so a run watched here and one the cluster watches must count alike;
the coordinator runs from the zipapp (stdlib only), so the rule lives where both can
import it. The rule: a node's GPUs are the rows nvidia-smi listed, at most one per
process the node runs; no nvidia-smi lists 0 (a CPU job costs no GPU-hours); a reading
with no GPU row and an error line (a driver that failed) says nothing, so that node is
unknown, never 0. The most a node was seen holding counts: a GPU that falls off the bus
was held all the same. Readings are node data: a line the table rule cannot take is an
error line, never a GPU, and nothing in them makes this raise.
"""

from __future__ import annotations

import csv
import io
import re

MAX_HELD = 1 << 16  # GPUs one node may hold, far over any machine's: a bound on data
_FIELD = re.compile(r"[a-z_][a-z0-9_.]*( \[[^\]]*\])?", re.IGNORECASE)


def split_table(text: str) -> tuple[list[str] | None, list[list[str]], list[str]]:
    """(header cells, each data row's cells, the lines that are no data) of an
    nvidia-smi `--format=csv` answer: the header is the first line of field names; a
    row is a line of as many cells as it. poll/gpu.py reads its fields from these."""
    header: list[str] | None = None
    rows: list[list[str]] = []
    errors: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if "\x00" in line:  # no answer of nvidia-smi's, and csv's take on it varies by Python
            errors.append(line)
            continue
        try:
            cells = next(csv.reader(io.StringIO(line), skipinitialspace=True))
        except (csv.Error, StopIteration):
            errors.append(line)
            continue
        if header is None and len(cells) > 1 and all(_FIELD.fullmatch(c.strip()) for c in cells):
            header = cells
            continue
        if header is None or len(cells) != len(header):
            errors.append(line)
            continue
        rows.append(cells)
    return header, rows, errors


def listed(gpus: int | None, failed: bool) -> int | None:
    """The GPUs a node's nvidia-smi listed: `gpus` rows (None: the node has no
    nvidia-smi, so 0); None (unknown) when it listed none and `failed` (error lines)."""
    if gpus is None:
        return 0
    if gpus <= 0:
        return None if failed else 0
    return gpus


def listed_in(gpu_csv: str | None, apps: str) -> int | None:
    """`listed` of a sentinel's reading as it travels (gpuwire.py): `gpu_csv` None when
    its node has no nvidia-smi; the errors of either answer count, as the poller's
    parse_reading keeps both."""
    if gpu_csv is None:
        return 0
    _, rows, errors = split_table(gpu_csv)
    return listed(len(rows), bool(errors) or bool(split_table(apps)[2]))


def see(held: dict[str, int], node: str, nproc: int | None, count: int | None) -> bool:
    """One reading of `node` (`count` as `listed` says) into `held` (node -> GPUs its
    processes hold): one per process, as many as there are (`nproc` None: unknown, so
    all listed); the most it was seen with counts. True when `held` changed."""
    if count is None or count < 0:
        return False
    now = min(count, nproc) if nproc is not None and nproc >= 0 else count
    now = min(now, MAX_HELD)
    if node in held and held[node] >= now:
        return False
    held[node] = now
    return True


def held_of(data: object) -> dict[str, int]:
    """A `held` map as written back (the coordinator's clock after a respawn): node
    names to counts in range, anything else dropped."""
    if not isinstance(data, dict):
        return {}
    return {
        n: v
        for n, v in data.items()
        if isinstance(n, str) and len(n) <= 128 and type(v) is int and 0 <= v <= MAX_HELD
    }
