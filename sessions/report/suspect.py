"""The straggler a run's coordinator named, kept in the run's directory for `status`,
the app and the report.

In synchronous training a slow rank makes every other rank wait for it in a collective,
so nothing fails and the step rates are all equal: the evidence is how much of their
time the ranks spend waiting. The coordinator judges that (node/coord/slowness.py); this
module only keeps its finding, as the records' sync copies it here (`straggler.json`,
next to run.json), and says it in one line: "rank 3 (g372) waits 4 % of the time, the
others 61–66 %: it holds the job". Kept in the report wing, so that the report can read
it too.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# The rank and the suspect are the cluster's coordinator's too (node/rules/straggle.py): one
# rule, one line, one file format for both watches.
from mntui.sessions.node.rules.straggle import RankWait, Suspect

__all__ = [
    "FILE", "Finding", "RankWait", "Suspect", "Throttle", "finding_of", "load_finding",
    "save_finding", "slow_section",
]  # fmt: skip

FILE = "straggler.json"


@dataclass(frozen=True)
class Throttle:
    """A GPU running below its max SM clock for a reason the driver names."""

    node: str
    index: int | None
    reasons: tuple[str, ...]
    sm_clock: float | None  # MHz
    max_clock: float | None  # MHz
    power: float | None  # W
    temperature: float | None  # °C

    @property
    def line(self) -> str:
        clock = ""
        if self.sm_clock is not None and self.max_clock:
            clock = f" at {self.sm_clock:.0f}/{self.max_clock:.0f} MHz"
        extra = [f"{self.power:.0f} W"] if self.power is not None else []
        extra += [f"{self.temperature:.0f} °C"] if self.temperature is not None else []
        more = f" ({', '.join(extra)})" if extra else ""
        gpu = "a GPU" if self.index is None else f"GPU {self.index}"
        return f"{gpu} of {self.node} is throttled{clock}: {', '.join(self.reasons)}{more}"


@dataclass(frozen=True)
class Finding:
    """What the sampler knows now: the suspect (or none yet), throttled GPUs, and the
    per-rank tally that either rests on."""

    suspect: Suspect | None
    throttles: tuple[Throttle, ...]
    ranks: tuple[RankWait, ...]
    rounds: int  # sample rounds taken
    malformed: int = 0  # node lines that were not what the sampler asked for

    @property
    def lines(self) -> list[str]:
        out = [f"straggler: {self.suspect.line}"] if self.suspect else []
        return out + [f"throttled: {t.line}" for t in self.throttles]


def save_finding(run_dir: Path, finding: Finding) -> None:
    """Atomically, so `status` never reads half a file."""
    tmp = run_dir / f".{FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(asdict(finding), indent=1))
    os.chmod(tmp, 0o600)
    os.replace(tmp, run_dir / FILE)


def load_finding(run_dir: Path) -> Finding | None:
    """None when the sampler never wrote one, or the file is not ours to trust."""
    try:
        data = json.loads((run_dir / FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return finding_of(data)


def finding_of(data: Any) -> Finding | None:
    """A finding's JSON (ours, or the cluster coordinator's), or None when it is not one."""
    try:
        found = _finding(data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    s = found.suspect  # its line names it among the others: both must be there
    if s is not None and (not s.others or all(r.rank != s.rank for r in s.ranks)):
        return None
    return found


def _ranks(items: Any) -> tuple[RankWait, ...]:
    return tuple(
        RankWait(int(r["rank"]), str(r["node"]), int(r["samples"]), int(r["waits"])) for r in items
    )


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


def _bounded(v: Any, most: float) -> float | None:
    """A time or a step time of the node's finding: a number in (0, most), else none
    (an infinite `since` would break the line that formats it)."""
    x = _opt(v)
    return x if x is not None and 0 < x < most else None


def _finding(d: dict[str, Any]) -> Finding:
    s = d["suspect"]
    suspect = None
    if s is not None:
        suspect = Suspect(
            int(s["rank"]), str(s["node"]), float(s["after"]), float(s["named_at"]),
            _ranks(s["ranks"]), _bounded(s.get("since"), 1e11), _bounded(s.get("step"), 1e6),
            _bounded(s.get("step_before"), 1e6),
        )  # fmt: skip
    throttles = tuple(
        Throttle(
            str(t["node"]),
            None if t["index"] is None else int(t["index"]),
            tuple(str(x) for x in t["reasons"]),
            _opt(t["sm_clock"]),
            _opt(t["max_clock"]),
            _opt(t["power"]),
            _opt(t["temperature"]),
        )
        for t in d["throttles"]
    )
    return Finding(suspect, throttles, _ranks(d["ranks"]), int(d["rounds"]), int(d["malformed"]))


def slow_section(run_dir: Path) -> list[str]:
    """The report's "Slow node" section: empty when nothing was found."""
    found = load_finding(run_dir)
    if found is None or not found.lines:
        return []
    out = ["Slow node (sampled while the job ran):"]
    out += [f"  {line}" for line in found.lines]
    if found.suspect is not None:
        shares = ", ".join(
            f"rank {r.rank} {round(100 * r.share)} % of {r.samples}" for r in found.suspect.ranks
        )
        out.append(f"  wait share per rank: {shares}; named after {found.suspect.after:.0f}s")
    return out
