"""GPU readings from `nvidia-smi --query-*` CSV output.

Columns are mapped by the CSV header, not by position, so the parser reads any
field order and any subset (and old recordings), and units (`95 %`, `745 MiB`) are
stripped whether or not `nounits` was asked for. Fields a card does not report
(`[N/A]`, `[Not Supported]`) become None, never 0: a 0 W power draw on a card that
cannot measure it is a lie on the screen. Error lines (a GPU that fell off the bus)
are kept: they are the most important thing to show, so they and the processes' names
(the node's words) are made terminal-safe here (termsafe.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The queries are defined once, for the sentinel that runs them too (node/wire/gpuwire.py).
from mntui.sessions.node.rules.gpucount import split_table
from mntui.sessions.node.wire.gpuwire import APP_FIELDS, APP_QUERY, GPU_FIELDS, GPU_QUERY
from mntui.sessions.termsafe import one_line

__all__ = [
    "APP_FIELDS",
    "APP_QUERY",
    "GPU_FIELDS",
    "GPU_QUERY",
    "Gpu",
    "GpuApp",
    "GpuReading",
    "parse_apps",
    "parse_gpus",
    "parse_reading",
    "parse_table",
]

_MISSING = {
    "",
    "n/a",
    "[n/a]",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "[gpu is lost]",
}
_UNIT = re.compile(r"\s*(%|MiB|MB|W|C|MHz)$")


@dataclass(frozen=True)
class Gpu:
    index: int | None
    uuid: str | None
    name: str | None
    util: float | None  # percent
    mem_used: float | None  # MiB
    mem_total: float | None  # MiB
    temperature: float | None  # °C
    power: float | None  # W
    power_limit: float | None  # W

    @property
    def mem_fraction(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return self.mem_used / self.mem_total


@dataclass(frozen=True)
class GpuApp:
    pid: int
    gpu_uuid: str | None
    used_memory: float | None  # MiB
    process_name: str
    own: bool = False  # started by this job (its PID carries the job's tag)


@dataclass(frozen=True)
class GpuReading:
    gpus: tuple[Gpu, ...]
    apps: tuple[GpuApp, ...]
    errors: tuple[str, ...]  # lines nvidia-smi printed instead of data

    def apps_on(self, gpu: Gpu) -> tuple[GpuApp, ...]:
        return tuple(a for a in self.apps if gpu.uuid is not None and a.gpu_uuid == gpu.uuid)

    @property
    def foreign_apps(self) -> tuple[GpuApp, ...]:
        return tuple(a for a in self.apps if not a.own)


def _key(header: str) -> str:
    return header.strip().split(" [", 1)[0].strip().lower()


def _value(raw: str) -> str | None:
    text = raw.strip()
    return None if text.lower() in _MISSING else text


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(_UNIT.sub("", raw))
    except ValueError:
        return None


def _int(raw: str | None) -> int | None:
    n = _number(raw)
    return int(n) if n is not None else None


def parse_table(text: str) -> tuple[list[dict[str, str | None]], list[str]]:
    """Rows of a `--format=csv` answer keyed by field name, plus lines that are not data:
    the table's shape is the one the GPU count reads too (node/rules/gpucount.py)."""
    head, body, bad = split_table(text)
    header = [_key(c) for c in head or ()]
    rows = [{h: _value(c) for h, c in zip(header, cells, strict=True)} for cells in body]
    return rows, [one_line(line).strip() for line in bad]


def parse_gpus(text: str) -> tuple[tuple[Gpu, ...], tuple[str, ...]]:
    rows, errors = parse_table(text)
    gpus = tuple(
        Gpu(
            index=_int(r.get("index")),
            uuid=r.get("uuid"),
            name=r.get("name"),
            util=_number(r.get("utilization.gpu")),
            mem_used=_number(r.get("memory.used")),
            mem_total=_number(r.get("memory.total")),
            temperature=_number(r.get("temperature.gpu")),
            power=_number(r.get("power.draw")),
            power_limit=_number(r.get("power.limit")),
        )
        for r in rows
    )
    # No index column (some recordings): number the GPUs in the order printed.
    if gpus and all(g.index is None for g in gpus):
        gpus = tuple(
            Gpu(
                i,
                g.uuid,
                g.name,
                g.util,
                g.mem_used,
                g.mem_total,
                g.temperature,
                g.power,
                g.power_limit,
            )
            for i, g in enumerate(gpus)
        )
    return gpus, tuple(errors)


def parse_apps(
    text: str, own_pids: frozenset[int] = frozenset()
) -> tuple[tuple[GpuApp, ...], tuple[str, ...]]:
    rows, errors = parse_table(text)
    apps = []
    for r in rows:
        pid = _int(r.get("pid"))
        if pid is None:
            continue
        used = r.get("used_memory") or r.get("used_gpu_memory")
        apps.append(
            GpuApp(
                pid,
                r.get("gpu_uuid"),
                _number(used),
                one_line(r.get("process_name") or "?"),
                own=pid in own_pids,
            )
        )
    return tuple(apps), tuple(errors)


def parse_reading(
    gpu_text: str, apps_text: str, own_pids: frozenset[int] = frozenset()
) -> GpuReading:
    gpus, errors = parse_gpus(gpu_text)
    apps, app_errors = parse_apps(apps_text, own_pids)
    return GpuReading(gpus, apps, tuple(dict.fromkeys(errors + app_errors)))
