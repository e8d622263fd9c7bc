"""GPUs that run slow: SM clock against its max, and the reasons the driver gives.

A GPU held below its clock (a power cap, heat, the board's slowdown signal) makes its rank
the straggler of a synchronous job while every utilization reading says "busy". The
driver says why in `clocks_throttle_reasons.active` (renamed `clocks_event_reasons`
in newer drivers: both headers are read), a bitmask from nvml.h. Parsed by the CSV
header like every nvidia-smi answer (gpu.parse_table), never by position.
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpu import parse_table

FIELDS = (
    "index",
    "clocks.sm",
    "clocks.max.sm",
    "clocks_throttle_reasons.active",
    "power.draw",
    "temperature.gpu",
)
# Bounded: a node's answer is data, and this one is a line per GPU.
THROTTLE_QUERY = (
    "command -v nvidia-smi >/dev/null 2>&1 && "
    f"nvidia-smi --query-gpu={','.join(FIELDS)} --format=csv 2>&1 | head -c 65536"
)

# nvml.h's clock throttle reasons that slow a busy GPU down. Idle, application clocks,
# sync boost and display clocks are a GPU's normal life, not a fault.
REASONS = {
    0x4: "power cap (SW)",
    0x8: "hardware slowdown",
    0x20: "thermal slowdown (SW)",
    0x40: "thermal slowdown (HW)",
    0x80: "power brake (HW)",
}


@dataclass(frozen=True)
class GpuClock:
    index: int | None
    sm_clock: float | None
    max_clock: float | None
    reasons: tuple[str, ...]  # the slowing reasons active now, () when none
    power: float | None
    temperature: float | None


def _float(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw.split()[0])
    except (ValueError, IndexError):
        return None


def reasons_of(mask: str | None) -> tuple[str, ...] | None:
    """The named reasons in a `0x...` mask; None for anything that is not one."""
    if mask is None:
        return None
    try:
        bits = int(mask.strip(), 16)
    except ValueError:
        return None
    return tuple(name for bit, name in REASONS.items() if bits & bit)


def parse_clocks(text: str) -> tuple[tuple[GpuClock, ...], int]:
    """The GPUs, and how many lines were not data (an error, a GPU off the bus)."""
    rows, errors = parse_table(text)
    out = []
    bad = len(errors)
    for r in rows:
        mask = r.get("clocks_throttle_reasons.active") or r.get("clocks_event_reasons.active")
        reasons = reasons_of(mask)
        bad += mask is not None and reasons is None
        index = _float(r.get("index"))
        out.append(
            GpuClock(
                None if index is None else int(index),
                _float(r.get("clocks.sm") or r.get("clocks.current.sm")),
                _float(r.get("clocks.max.sm")),
                reasons or (),
                _float(r.get("power.draw")),
                _float(r.get("temperature.gpu")),
            )
        )
    return tuple(out), bad


def throttled(gpus: tuple[GpuClock, ...]) -> tuple[GpuClock, ...]:
    """The GPUs a slowing reason holds now (the reason is the evidence; a low clock alone
    is an idle GPU)."""
    return tuple(g for g in gpus if g.reasons)
