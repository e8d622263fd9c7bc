"""The straggler detector, measured: precision and recall of the suspect it names, how soon,
what the sampling costs the job, and `doctor --pairs` naming a throttled node.

`.venv/bin/python bench/stragglers.py` (the full bench, ~15 min on 2 cores); `--quick`
for the suite's short version. Every run is a real straggler_train.py job (tests/jobs)
on 2-4 fake sshd nodes, watched by the cluster: each sentinel dumps its ranks with py-spy
every SAMPLE_EVERY seconds and the coordinator names the suspect (node/slowness.py). Slowdowns: one rank computes 1.3x, 2x or 4x longer per
step (the slow rank cycles through every rank position), clean runs none; and a node made
slow for real: its sshd in a cgroup v1 `cpu` child with a CFS quota (tests/straggle.py),
so the job's ranks there inherit it. A run ends a second after a suspect is named or
after LIMIT seconds. Prints a markdown table; writes bench/results/stragglers-<stamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import straggle  # noqa: E402
from fakecluster import FakeCluster, free_port  # noqa: E402

SAMPLE_EVERY = 0.5
LIMIT = 30.0
WORK = 0.1


@dataclass(frozen=True)
class Outcome:
    case: str
    nodes: int
    slow_rank: int | None
    named_rank: int | None
    named_node: str | None
    after_first_sample: float | None
    after_start: float | None
    shares: str = ""  # every rank's wait share when the run ended: the evidence either way

    @property
    def correct(self) -> bool:
        return self.named_rank is not None and self.named_rank == self.slow_rank


def write_job(fake: FakeCluster, root: Path, job: str, nodes: int, args: str, watch: str) -> Path:
    work = root / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(straggle.JOB_SCRIPT, work)
    names = [f"node{i}" for i in range(nodes)]
    body = straggle.job_yaml(job, names, free_port(), work, args, watch)
    path = root / f"{job}.yaml"
    path.write_text(
        textwrap.dedent(body).strip()
        + f"\nssh: {{config: {fake.ssh_config}, connect_timeout: 5}}\n"
    )
    return path


def one(
    fake: FakeCluster, root: Path, i: int, case: str, nodes: int, factor: float, limit: float
) -> Outcome:
    slow = i % nodes if factor > 1 else None
    job = f"strag{i}"
    args = f"--work {WORK} --kind sleep"
    if slow is not None:
        args += f" --slow-rank {slow} --slow-factor {factor}"
    path = write_job(fake, root, job, nodes, args, f"sample_every: {SAMPLE_EVERY}")
    run = straggle.run_once(fake, path, job, limit, stop_early=True)
    s = run.suspect
    return Outcome(
        case, nodes, slow, s.rank if s else None, s.node if s else None,
        s.after if s else None, run.named_after, shares_of(run),
    )  # fmt: skip


def shares_of(run: straggle.Run) -> str:
    ranks = run.finding.ranks if run.finding else ()
    return " ".join(f"{r.rank}:{round(100 * r.share)}%/{r.samples}" for r in ranks)


def cgroup_run(root: Path, i: int, quota: float) -> Outcome:
    """node1 of a fresh 2-node cluster at `quota` of a CPU, a job that burns the CPU."""
    with FakeCluster(root / f"cg{i}", 2).start() as fake:
        job = f"stragcg{i}"
        args = "--work 0.1 --kind cpu"
        path = write_job(fake, root, job, 2, args, f"sample_every: {SAMPLE_EVERY}")
        with straggle.cpu_quota(straggle.sshd_pid(fake, "node1"), quota, f"bench{i}"):
            run = straggle.run_once(fake, path, job, 40, stop_early=True)  # a busy host: slower
    s = run.suspect
    return Outcome(
        f"node1 at {quota:g} CPU (cgroup)", 2, 1, s.rank if s else None, s.node if s else None,
        s.after if s else None, run.named_after, shares_of(run),
    )  # fmt: skip


def step_rate(times: list[float], skip: float = 3.0) -> float | None:
    """Steps per second after the first `skip` seconds (start-up, first samples)."""
    if len(times) < 3:
        return None
    kept = [t for t in times if t >= times[0] + skip]
    return (len(kept) - 1) / (kept[-1] - kept[0]) if len(kept) > 2 else None


COST = {"off": 0.0, "every 1s": 1.0, "every 10s (default)": 10.0}


def cost(fake: FakeCluster, root: Path, reps: int, seconds: float) -> dict[str, list[float]]:
    """Clean 2-node runs with sampling off, every second (ten times the default's rate:
    a cost large enough to see on this host) and at the default, in ABBA order so that a
    drift of the host's load falls on every setting alike. Returns the step rates of
    each setting (the sentinels' rounds are not timed from here: no cost per round)."""
    rates: dict[str, list[float]] = {name: [] for name in COST}
    for r in range(reps):
        order = list(COST.items())
        for name, every in order if r % 2 == 0 else order[::-1]:
            job = f"stragcost{r}{int(every)}"
            path = write_job(
                fake, root, job, 2, "--work 0.05 --kind sleep", f"sample_every: {every}"
            )
            run = straggle.run_once(fake, path, job, seconds, stop_early=False)
            times = (run.steps or {}).get("node0", [])
            rate = step_rate(times)
            if rate is not None:
                rates[name].append(rate)
    return rates


def cost_table(rates: dict[str, list[float]]) -> list[str]:
    base = statistics.median(rates["off"]) if rates["off"] else None
    out = ["", "| sampling | runs | steps/s, median (min–max) | vs off |", "|---|---:|---:|---:|"]
    for name, xs in rates.items():
        if not xs:
            continue
        med = statistics.median(xs)
        vs = f"{100 * (med / base - 1):+.1f} %" if base and name != "off" else ""
        out.append(f"| {name} | {len(xs)} | {med:.2f} ({min(xs):.2f}–{max(xs):.2f}) | {vs} |")
    return out


def doctor_pairs(root: Path, quota: float | None) -> tuple[str, float, bool]:
    """`doctor --pairs` on 4 fresh nodes, node2 at `quota` of a CPU (None: clean)."""
    with FakeCluster(root / f"pairs{quota}", 4).start() as fake:
        t0 = time.monotonic()
        res = straggle.doctor_pairs(fake, root / "pairs.yaml", quota)
        took = time.monotonic() - t0
    line = next((x for x in res.stdout.splitlines() if x.startswith("pairs: ")), "no line")
    named_only_node2 = "node2 is slow" in line and line.count(" is slow") == 1
    right = named_only_node2 if quota else "no slow node" in line
    return line, took, right


def pct(n: int, d: int) -> str:
    return f"{100 * n / d:.0f} % ({n}/{d})" if d else "-"


def spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"


def table(outs: list[Outcome]) -> list[str]:
    rows = [
        "| case | runs | nodes | named right | named wrong | none named | "
        "time to name, s: from first sample | from watch start |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for case in dict.fromkeys(o.case for o in outs):
        mine = [o for o in outs if o.case == case]
        right = sum(o.correct for o in mine)
        wrong = sum(o.named_rank is not None and not o.correct for o in mine)
        none = sum(o.named_rank is None for o in mine)
        nodes = ",".join(str(n) for n in sorted({o.nodes for o in mine}))
        firsts = [o.after_first_sample for o in mine if o.correct and o.after_first_sample]
        starts = [o.after_start for o in mine if o.correct and o.after_start]
        rows.append(
            f"| {case} | {len(mine)} | {nodes} | {right} | {wrong} | {none} | "
            f"{spread(firsts)} | {spread(starts)} |"
        )
    named = [o for o in outs if o.named_rank is not None]
    slow = [o for o in outs if o.slow_rank is not None]
    rows.append("")
    rows.append(
        f"Precision (suspects that were the slow rank): {pct(sum(o.correct for o in named), len(named))}; "
        f"recall over all slowed runs: {pct(sum(o.correct for o in slow), len(slow))}."
    )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the suite's short version")
    ap.add_argument("--runs", type=int, default=8, help="runs per slowdown case")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mntui-stragglers-"))
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    runs = 1 if args.quick else args.runs
    cases = [("clean", 1.0), ("2x", 2.0)] if args.quick else [
        ("clean", 1.0), ("1.3x", 1.3), ("2x", 2.0), ("4x", 4.0)
    ]  # fmt: skip
    outs: list[Outcome] = []
    t0 = time.monotonic()
    try:
        with FakeCluster(root / "fake", 4).start() as fake:
            i = 0
            for r in range(runs):
                for case, factor in cases:
                    nodes = 2 if args.quick else 2 + (r + i) % 3
                    # quick: a clean run is given less time (it runs to the limit)
                    limit = (12 if factor == 1 else 25) if args.quick else LIMIT
                    outs.append(one(fake, root, i, case, nodes, factor, limit))
                    print(outs[-1], flush=True)
                    i += 1
            rates = {} if args.quick else cost(fake, root, 3, 20.0)
        if straggle.can_throttle() and not args.quick:
            for k in range(4):
                outs.append(cgroup_run(root, 100 + k, 0.5))
                print(outs[-1], flush=True)
        pairs = []
        if straggle.can_throttle():
            for quota in [] if args.quick else [0.1, 0.1, None]:
                pairs.append((quota, *doctor_pairs(root, quota)))
                print(pairs[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = table(outs)
    if rates:
        out += cost_table(rates)
    if pairs:
        out += ["", "| doctor --pairs, 4 nodes | right | s | its line |", "|---|---|---:|---|"]
        for quota, line, took, right in pairs:
            what = f"node2 at {quota:g} CPU" if quota else "clean"
            out.append(f"| {what} | {'yes' if right else 'NO'} | {took:.0f} | {line} |")
    print("\n".join(out))
    print(f"\n{len(outs)} runs in {time.monotonic() - t0:.0f}s")
    slow2 = [o for o in outs if o.case == "2x"]
    clean_false = [o for o in outs if o.case == "clean" and o.named_rank is not None]
    ok = sum(o.correct for o in slow2) >= 0.9 * len(slow2) and not clean_false
    if not args.quick:  # the suite's short run leaves nothing in the tree
        results = REPO / "bench" / "results"
        results.mkdir(exist_ok=True)
        data = {
            "outcomes": [o.__dict__ for o in outs],
            "rates": rates,
            "pairs": [list(p) for p in pairs],
            "table": out,
        }
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (results / f"stragglers-{stamp}.json").write_text(json.dumps(data, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
