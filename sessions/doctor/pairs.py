"""`mntui doctor --pairs`: which node (or link) is slow, before a launch, from all-reduces
between pairs of nodes.

A whole-job all-reduce is as slow as its slowest node and says nothing of which one.
Pairs do (DLRover's network check, in two rounds): round 1 pairs the nodes (0,1),
(2,3)… (an odd one out joins node 0); a pair is slow when its all-reduce bandwidth is
less than the best pair's over SLOW, or its latency more than SLOW_LATENCY times the
best's (latency is the noisier: a busy host's scheduler alone moved it 2.6x in the
bench, bandwidth 1.2x; a node at a tenth of a CPU moved both 4-6x). Round
2 pairs each node of a slow pair with a node of a fast pair: the node slow with a fast
partner is the slow node. When neither is slow by those thresholds, the two round-2
pairs are weighed against the slow pair itself: a node whose pairing with a fast partner
came out nearer the slow pair's number than the fast pairs' carries the slowness (a
node at a fifth of a CPU is only 2-3x slower, right at the thresholds, so round 2 may
land under them where round 1 did not: issue 41); a pair whose two nodes both come out
as fast as the fast pairs is a slow link.
Each pair is the doctor's own smoke job (smoke.py) on just those two nodes, through the
normal launch path, one pair at a time (they would share the nodes' network and ports).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import private_dir, state_dir
from mntui.sessions.ssh import Cluster

from .checks import Check, Status
from .smoke import smoke_results

SLOW = 2.0
SLOW_LATENCY = 3.0
SUSTAIN = 2.0  # seconds of all-reduces per pair: a CPU quota or a clock cap shows under load


@dataclass(frozen=True)
class Pair:
    round: int
    a: str
    b: str
    latency_us: float | None  # the slowest rank's: one float all-reduced
    algbw_gbps: float | None  # the slowest rank's: 4 MiB all-reduced
    error: str | None = None
    slow: bool = False
    mistake: bool = False  # it failed for the config's sake (no torch), not the nodes'

    @property
    def ok(self) -> bool:
        return self.error is None and self.latency_us is not None


@dataclass(frozen=True)
class Verdict:
    pairs: tuple[Pair, ...]
    slow_nodes: tuple[str, ...]
    slow_links: tuple[tuple[str, str], ...]
    line: str


def measure(cfg: JobConfig, cluster: Cluster, a: str, b: str, rnd: int, timeout: float) -> Pair:
    """The smoke job on `a` and `b` alone, `a` its main at rank 0 (its own master
    address: a configured one is the job's main's)."""
    nodes = (replace(cfg.node(a), rank=0), replace(cfg.node(b), rank=1))
    sub = replace(cfg, nodes=nodes, main=a, master_addr=None)
    results, failed = smoke_results(sub, cluster, timeout, SUSTAIN)
    got = [r for rs in results.values() for r in rs if r.ok]
    lat = [r.latency_us for r in got if r.latency_us is not None]
    bw = [r.algbw_gbps for r in got if r.algbw_gbps is not None]
    error = failed.detail if failed is not None else None
    if error is None and not got:
        error = "no rank gave a result"
    mistake = failed is not None and not failed.node_fault
    return Pair(
        rnd, a, b, max(lat) if lat else None, min(bw) if bw else None, error, False, mistake
    )


def judge_pairs(pairs: list[Pair]) -> list[Pair]:
    """Marks each pair slow or not against the best pair measured (a failed pair is slow:
    it could not even all-reduce)."""
    good = [p for p in pairs if p.ok]
    if len(good) < 2:
        return [replace(p, slow=not p.ok) for p in pairs]
    best_lat = min(p.latency_us or 0.0 for p in good)
    best_bw = max(p.algbw_gbps or 0.0 for p in good)
    return [replace(p, slow=_slower(p, best_lat, best_bw)) for p in pairs]


def _slower(p: Pair, best_lat: float, best_bw: float) -> bool:
    if not p.ok:
        return True
    slow_lat = (p.latency_us or 0.0) > SLOW_LATENCY * best_lat
    slow_bw = p.algbw_gbps is not None and best_bw > 0 and p.algbw_gbps * SLOW < best_bw
    return slow_lat or slow_bw


def round_one(names: list[str]) -> list[tuple[str, str]]:
    pairs = [(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]
    if len(names) % 2 and len(names) > 1:
        pairs.append((names[-1], names[0]))
    return pairs


def run_pairs(cfg: JobConfig, cluster: Cluster, timeout: float = 60.0) -> Verdict:
    names = [n.name for n in cfg.nodes]
    first = [measure(cfg, cluster, a, b, 1, timeout) for a, b in round_one(names)]
    first = judge_pairs(first)
    slow = [p for p in first if p.slow]
    fast_nodes = [n for p in first if not p.slow for n in (p.a, p.b)]
    if not slow or not fast_nodes:
        return conclude(first, [], names)
    second: list[Pair] = []
    k = 0
    for p in slow:
        for node in (p.a, p.b):
            partner = fast_nodes[k % len(fast_nodes)]
            k += 1
            second.append(measure(cfg, cluster, node, partner, 2, timeout))
    judged = judge_pairs(first + second)
    return conclude(judged[: len(first)], judged[len(first) :], names)


def conclude(first: list[Pair], second: list[Pair], names: list[str]) -> Verdict:
    """Round 2's pairs name the node; a slow pair with no round 2 names the pair."""
    nodes: list[str] = []
    links: list[tuple[str, str]] = []
    with_fast = {p.a: p for p in second}  # round 2: the slow pair's node, a fast partner
    scale = Scale.of(first + second, [p for p in first if p.ok and not p.slow])
    for p in first:
        if not p.slow:
            continue
        mine = {n: with_fast[n] for n in (p.a, p.b) if n in with_fast}
        alone = [n for n, q in mine.items() if q.slow]
        if not alone and len(mine) == 2:
            alone = [n for n, q in mine.items() if scale.carries(q, p)]
        if alone:
            nodes += alone
        else:  # both fast with a fast partner, or nothing fast to compare with
            links.append((p.a, p.b))
    pairs = tuple(first + second)
    named = tuple(dict.fromkeys(nodes))
    return Verdict(pairs, named, tuple(links), _line(pairs, named, links, with_fast))


@dataclass(frozen=True)
class Scale:
    """How slow a pair is, in thresholds: log(its latency over the best's) over
    log(SLOW_LATENCY), or log(the best bandwidth over its) over log(SLOW), whichever is
    more; over 1 is slow, as judge_pairs says. `fast`: the round-1 fast pairs' median."""

    best_lat: float
    best_bw: float
    fast: float

    @classmethod
    def of(cls, pairs: list[Pair], fast_pairs: list[Pair]) -> Scale:
        good = [p for p in pairs if p.ok]
        best_lat = min((p.latency_us or 0.0 for p in good), default=0.0)
        best_bw = max((p.algbw_gbps or 0.0 for p in good), default=0.0)
        scale = cls(best_lat, best_bw, 0.0)
        fast = [scale.slowness(p) for p in fast_pairs]
        return replace(scale, fast=statistics.median(fast) if fast else 0.0)

    def slowness(self, p: Pair) -> float:
        if not p.ok:
            return math.inf
        lat, bw, by_lat, by_bw = p.latency_us, p.algbw_gbps, 0.0, 0.0
        if lat and self.best_lat > 0:
            by_lat = math.log(lat / self.best_lat) / math.log(SLOW_LATENCY)
        if bw and self.best_bw > 0:
            by_bw = math.log(self.best_bw / bw) / math.log(SLOW)
        return max(by_lat, by_bw)

    def carries(self, q: Pair, slow: Pair) -> bool:
        """`q` (a node of `slow` with a fast partner) nearer `slow` than the fast pairs:
        that node brings the slowness with it wherever it goes."""
        if not slow.ok:  # a failed pair has no number to be near: its nodes' rows say
            return False
        return self.slowness(q) >= (self.slowness(slow) + self.fast) / 2


def _line(
    pairs: tuple[Pair, ...],
    nodes: tuple[str, ...],
    links: list[tuple[str, str]],
    with_fast: dict[str, Pair],
) -> str:
    """The verdict; a named node's evidence is its pair with a fast partner (round 2
    names no node without one); the reference, the fast pairs without a named node (a
    round-2 pair that carried a node's slowness was under the thresholds)."""
    fast = [
        p.latency_us
        for p in pairs
        if p.ok and not p.slow and p.latency_us is not None and not {p.a, p.b} & set(nodes)
    ]
    ref = f"{statistics.median(fast):.0f} us between fast pairs" if fast else "no fast pair"
    if len(pairs) == 1:
        return "one pair only: nothing to compare it with (--pairs needs 3 or more nodes)"
    words = []
    for n in nodes:
        shown = with_fast[n]
        words.append(f"{n} is slow: {_said(shown)} with {shown.b if shown.a == n else shown.a}")
    for a, b in links:
        p = next(p for p in pairs if {p.a, p.b} == {a, b})
        words.append(f"the link {a}–{b} is slow: {_said(p)}")
    if not words:
        return f"no slow node or link: every pair within {SLOW:g}x of the best's bandwidth ({ref})"
    return "; ".join(words) + f" (vs {ref})"


def _said(p: Pair) -> str:
    if not p.ok:
        return f"all-reduce failed ({p.error})"
    return f"all-reduce {p.latency_us:.0f} us, {p.algbw_gbps or 0:.3f} GB/s"


def node_rows(v: Verdict) -> list[tuple[str, str, str, str]]:
    """The per-node table: node, its pairs' latency (us), bandwidth (GB/s), verdict."""
    rows = []
    seen = dict.fromkeys(n for p in v.pairs for n in (p.a, p.b))
    for n in seen:
        mine = [p for p in v.pairs if n in (p.a, p.b)]
        lat = ", ".join("failed" if not p.ok else f"{p.latency_us:.0f}" for p in mine)
        bw = ", ".join("-" if not p.ok else f"{p.algbw_gbps or 0:.3f}" for p in mine)
        linked = any(n in link for link in v.slow_links)
        verdict = "SLOW" if n in v.slow_nodes else "slow link" if linked else "ok"
        rows.append((n, lat, bw, verdict))
    return rows


def pair_checks(v: Verdict) -> list[Check]:
    """The verdict as the doctor's rows: a slow node (or both ends of a slow link) fails,
    as the node's own failure unless its pairs failed for the config's sake."""
    fix = "take the node out (or check its CPU/GPU clocks, its NIC and cables) and re-run"
    out = []
    for node, lat, bw, verdict in node_rows(v):
        detail = f"pairs' all-reduce latency {lat} us, bandwidth {bw} GB/s"
        ok = verdict == "ok"
        mistake = any(p.mistake for p in v.pairs if node in (p.a, p.b))
        status, why = (Status.PASS, "") if ok else (Status.FAIL, fix)
        out.append(Check(node, "pairs", status, detail, why, not ok and not mistake))
    return out


def save_pairs(job: str, v: Verdict, started: float, now: float | None = None) -> Path:
    """One JSON file per `doctor --pairs` run, for the node history, at
    state_dir()/<job>/doctor/doctor-pairs-<YYYYmmdd-HHMMSS>.json (0600): `at` and
    `started_at` (epoch seconds), `kind: "pairs"`, `threshold` (SLOW), `line` (the
    verdict), `slow_nodes` [node], `slow_links` [[a, b]], `pairs` [{round, a, b,
    latency_us, algbw_gbps, error, slow, mistake}] (a: the pair's main; None where no
    number), and
    `rows` [{node, check: "pairs", status: PASS|FAIL, detail, fix}] as every doctor run
    keeps them (history/records.py reads those)."""
    now = time.time() if now is None else now
    folder = private_dir(state_dir() / job / "doctor")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path = folder / f"doctor-pairs-{stamp}.json"
    if path.exists():  # two runs in one second
        path = folder / f"doctor-pairs-{stamp}-{os.getpid()}.json"
    data = {
        "at": now,
        "started_at": started,
        "kind": "pairs",
        "threshold": SLOW,
        "line": v.line,
        "slow_nodes": list(v.slow_nodes),
        "slow_links": [list(link) for link in v.slow_links],
        "pairs": [asdict(p) for p in v.pairs],
        "rows": [asdict(c) for c in pair_checks(v)],
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1)
    return path
