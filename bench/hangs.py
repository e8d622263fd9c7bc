"""Hang campaign (issue 20): injected hangs on real sshd nodes with real torchrun, and
whether the report of the cluster's teardown names the rank that hangs the job.

    .venv/bin/python bench/hangs.py --seed 20 --hangs 42
    .venv/bin/python bench/hangs.py --hangs 2 --kinds sleep,barrier --nodes 2

Kinds (bench/hangs_run.py): one rank never reaches collective i, sleeping in "data
loading" (`sleep`), busy-looping in Python (`busy`), waiting on a lock (`lock`), entering
a barrier while the others all-reduce (`barrier`), or SIGSTOPped (`sigstop`). For each:
was the culprit named right (the report's first culprit is exactly that rank on that
node), seconds from the injection to the coordinator's decision, and from the decision
to its evidence saved on the nodes (the sentinels' stacks, before the kill; the kill's
end, a column of its own). A share of the stalls run with
`stall_after: auto` (the learnt threshold, max(60 s, 10 × the step interval)): their
decision must come within the threshold they learnt plus a second (a poll and the
others' last step). A hang whose job never reached training (a loaded machine) is a
harness error, tried once more and counted in the summary.
The seed draws kind, node count, culprit and step up front. Exit 1 if any hang was named
wrong or the harness failed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import in_rounds, isolate  # noqa: E402
from fakecluster import FakeCluster  # noqa: E402
from hangs_run import IN_JOB, KINDS, HangRun, Plan, Result  # noqa: E402

LIMIT = 150.0  # seconds for one hang, launch to cleanup (auto: + the 60 s threshold)


def draw(seed: int, n: int, kinds: list[str], sizes: list[int], auto_share: float) -> list[Plan]:
    """Kinds in shuffled rounds (each as often as the others), then a node count, a
    culprit rank, a hang step and (stalls only) whether the threshold is learnt."""
    rng = random.Random(seed)
    plans = []
    for i, kind in enumerate(in_rounds(rng, kinds, n)):
        nodes = rng.choice(sizes)
        auto = kind in IN_JOB and rng.random() < auto_share
        plans.append(Plan(i, kind, nodes, rng.randrange(nodes), rng.randint(8, 14), auto))
    return plans


def table(results: list[Result]) -> str:
    """The README's table: one row a kind, then all; times are median / max."""
    rows = ["| kind | hangs | named right | decided after injection | stacks + dumps | kill | "
            "report after decision | kill ended after decision |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups = {k: [r for r in results if r.plan.kind == k] for k in KINDS}
    groups = {k: v for k, v in groups.items() if v}
    autos = [r for r in results if r.plan.auto]
    if autos:
        groups["(stall_after: auto)"] = autos
    groups["all"] = results
    for kind, rs in groups.items():
        right = sum(r.named for r in rs)
        rows.append(f"| {kind} | {len(rs)} | {right}/{len(rs)} ({100 * right / len(rs):.0f} %) | "
                    f"{_spread([r.decided_s for r in rs])} | {_spread([r.capture_s for r in rs])} | "
                    f"{_spread([r.kill_s for r in rs])} | {_spread([r.report_s for r in rs])} | "
                    f"{_spread([r.final_s for r in rs])} |")  # fmt: skip
    return "\n".join(rows)


def _spread(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    return f"{statistics.median(got):.1f} s / {max(got):.1f} s"


def summary(results: list[Result], took: float, seed: int) -> str:
    right = sum(r.named for r in results)
    late = [r for r in results if r.report_s is not None and r.report_s > 2.0]
    autos = [r for r in results if r.plan.auto]
    # The other ranks' last output is up to a step before the injection; a poll is 0.5 s.
    slow = [
        r for r in autos
        if r.decided_s is None or r.threshold is None or r.decided_s > r.threshold + 1.0
    ]  # fmt: skip
    retried = [r for r in results if r.retried]
    lines = [
        f"hangs: seed {seed}, {len(results)} hangs over {len({r.plan.kind for r in results})} "
        f"kinds in {took:.0f}s; culprit named right in {right}/{len(results)} "
        f"({100 * right / max(1, len(results)):.1f} %)",
        f"report complete more than 2 s after the decision: {len(late)}",
        f"auto threshold: {len(autos)} hang(s) (learnt: "
        f"{', '.join(f'{r.threshold:g} s' for r in autos if r.threshold) or '-'}), decided "
        f"later than the threshold + 1 s: {len(slow)}",
        f"harness retries (a launch that did not train; tried once more): {len(retried)}",
        "",
        table(results),
    ]
    for r in results:
        if not r.named or r.error:
            what = r.error or f"named {r.named_as}: {r.headline}"
            lines.append(f"WRONG {r.plan.describe()}: {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--hangs", type=int, default=42)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--nodes", default="2,4", help="node counts to draw from")
    ap.add_argument("--auto-share", type=float, default=0.15, help="of the in-job stalls")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    sizes = sorted({int(s) for s in args.nodes.split(",") if s})
    if [k for k in kinds if k not in KINDS] or not sizes or min(sizes) < 2 or args.hangs < 1:
        ap.error(f"kinds: {', '.join(KINDS)}; --nodes at least 2; --hangs at least 1")
    plans = draw(args.seed, args.hangs, kinds, sizes, args.auto_share)
    root = Path(tempfile.mkdtemp(prefix="mntui-hangs-"))
    isolate(root)
    print(f"hangs: seed {args.seed}, {len(plans)} hangs, work dir {root}", file=sys.stderr)
    t0 = time.monotonic()
    fc = FakeCluster(root / "cluster", max(sizes)).start()
    results: list[Result] = []
    try:
        for plan in plans:
            fc.start()  # a node's sshd that died is started again
            limit = LIMIT + (70 if plan.auto else 0)
            run = HangRun(fc, root, plan)
            r = run.run(limit)
            if run.harness:
                print(f"  {plan.describe()}: harness error, once more: {r.error}", file=sys.stderr)
                fc.start()
                r = HangRun(fc, root, plan, retry=True).run(limit)
                r.retried = run.out.error
            results.append(r)
            print(f"  {plan.describe()}: {'right' if r.named else 'WRONG'} "
                  f"decided {r.decided_s} report {r.report_s} | {r.error or r.headline[:150]}",
                  file=sys.stderr, flush=True)  # fmt: skip
    finally:
        fc.stop()
        subprocess.run(["tmux", "kill-server"], capture_output=True)  # our own, isolated
        took = time.monotonic() - t0
        if args.json:
            data = {"seed": args.seed, "took_s": round(took, 1),
                    "hangs": [asdict(r) for r in results]}  # fmt: skip
            args.json.write_text(json.dumps(data, indent=2, default=str))
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(summary(results, took, args.seed))
    return 0 if results and all(r.named and not r.error for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
