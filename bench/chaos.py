"""Fault campaign (issue 18): randomized faults over a job's whole lifecycle, on real sshd
nodes (tests/fakecluster.py) with a real torchrun job (gloo, CPU), restart chains and a
spare included; after each, the invariants of mntui's promises.

    .venv/bin/python bench/chaos.py --seed 18 --faults 20
    .venv/bin/python bench/chaos.py --faults 3 --kinds partial-kill,tmux-kill --profiles plain

A fault is one chain of one fresh job: launch, hit it (the kinds are bench/chaos_kinds.py's),
let the chain end or come back, and check, as it ended and again after the user's
`mntui kill` where anything was left: no process tagged with the job on any node, its
port free, none of its tmux sessions, every run record terminal (or superseded by a later
attempt), no attempt created after a kill, `mntui status` saying so when the supervisor
died, and no file changed in any node's home outside ~/.mntui (the workdir is outside the
homes). Between two attempts of a chain (issue 28, bench/chaos_between.py): a user's kill
right after the job failed must end the chain (no `restarting` mark, no attempt after
the kill's note), and a node quarantined in the backoff or by `restart.quarantine_after`
must leave the next attempt on the spare, whose teardown kills every process of it there.

    .venv/bin/python bench/chaos.py --faults 4 --kinds fail-kill,quarantine --profiles restart

The watch on the cluster (issue 30, bench/chaos_cluster.py) has its own kinds, in its own
profile (`--kinds` defaults to every kind that runs in one of `--profiles`):

    .venv/bin/python bench/chaos.py --seed 30 --faults 14 --profiles cluster

A flood of unauthenticated connections at the coordinator's port, and a frozen main that
wakes (issue 39, bench/chaos_attack.py), are kinds of that profile too:

    .venv/bin/python bench/chaos.py --faults 4 --kinds unauth-flood,main-wake --profiles cluster

The seed draws the faults (kind, profile, node, moment) up front; timings on a
shared machine still vary. Every failure is a VIOLATION line; the exit code is 1 if any
(or a harness error), else 0. Each fault has its own deadline; a fault that fails is
cleaned up by tag and the campaign goes on.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

import chaos_attack  # noqa: E402
import chaos_between  # noqa: E402
import chaos_renamed  # noqa: E402
from benchlib import in_rounds, isolate  # noqa: E402
from chaos_fault import Fault, FaultPlan, Outcome  # noqa: E402
from chaos_job import LOCAL, Job, Profile  # noqa: E402
from chaos_kinds import KINDS, MOMENTS, PROFILES  # noqa: E402
from fakecluster import FakeCluster  # noqa: E402

ABBR = {k: "".join(w[0] for w in k.split("-")) for k in KINDS}  # rank-exit -> re
SPARE_SHARE = 0.25  # of the faults whose kind may run in a spare chain (3 attempts: slow)


def draw(
    seed: int, n: int, kinds: list[str], profiles: list[Profile], nodes: int
) -> list[FaultPlan]:
    """The campaign's faults: kinds in shuffled rounds (each kind as often as the others),
    then a profile, a node, a moment for each."""
    rng = random.Random(seed)
    plans = []
    for i, kind in enumerate(in_rounds(rng, kinds, n)):
        allowed = [p for p in PROFILES.get(kind, LOCAL) if p in profiles]
        allowed = [p for p in allowed if p is not Profile.SPARE or nodes >= 3]
        if kind in chaos_between.NEEDS_SPARE and nodes < 3:
            raise SystemExit(f"chaos: {kind} needs a spare: --nodes 3 or more")
        if not allowed:
            raise SystemExit(f"chaos: {kind} runs in none of --profiles {profiles}")
        others = [p for p in allowed if p is not Profile.SPARE]
        spare = Profile.SPARE in allowed and (not others or rng.random() < SPARE_SHARE)
        profile = Profile.SPARE if spare else rng.choice(others)
        moment = rng.choice(MOMENTS[kind]) if kind in MOMENTS else ""
        if moment in ("backoff", "relaunch") and profile is not Profile.RESTART:
            moment = "watching"  # a plain run has no backoff; a spare chain's is the spare's
        then = rng.choice(("kill", "resume")) if kind == "supervisor-kill" else ""
        delay = rng.uniform(0.0, 3.0)
        plans.append(FaultPlan(i, kind, profile, rng.random(), delay, moment, then,
                               rng.randint(3, 6)))  # fmt: skip
    return plans


def job_args(plan: FaultPlan) -> tuple[str, float]:
    """The job's own failure (its args) and the backoff, for kinds that need one."""
    again = " --fail-attempts 1" if plan.profile is Profile.RESTART else ""
    if plan.kind in chaos_between.KINDS:
        return chaos_between.job_args(plan), chaos_between.BACKOFF
    if plan.kind in chaos_renamed.JOB_ARGS:  # the job hides from its tag
        return chaos_renamed.JOB_ARGS[plan.kind], 2
    if plan.kind == "rank-exit":
        return (
            f"--fail-rank {int(plan.pick * 2)} --fail-step {plan.fail_step} --how exit3{again}",
            2,
        )
    if plan.moment in ("backoff", "relaunch"):  # the job fails by itself, once
        # `backoff`: `delay` (up to 3 s) into it; `relaunch`: just past its end, any length
        backoff = 4 if plan.moment == "backoff" else 2
        return f"--fail-rank 1 --fail-step {plan.fail_step} --how exit3{again}", backoff
    return "", 2


def run_fault(fc: FakeCluster, root: Path, plan: FaultPlan) -> Outcome:
    t0 = time.monotonic()
    fc.start()  # a node's sshd that died is started again
    args, backoff = job_args(plan)
    restart, extra = chaos_between.config(plan, [n.name for n in fc.nodes])
    restart = restart or chaos_attack.RESTARTS.get(plan.kind, "")
    job = Job(fc, root, f"c{plan.index:02d}{ABBR[plan.kind]}", plan.profile, args, backoff,
              restart, extra)  # fmt: skip
    limit = 480 if plan.profile is Profile.SPARE else 330
    fault = Fault(fc, root, plan, job, limit)
    print(f"  {plan.describe()} job {job.job}", file=sys.stderr, flush=True)
    try:
        KINDS[plan.kind](fault)
        fault.check_files()
    except Exception as exc:  # a harness failure: logged, cleaned up by tag, next fault
        fault.out.error = f"{type(exc).__name__}: {exc}"
        print(f"    {plan.index}: HARNESS ERROR {fault.out.error}", file=sys.stderr, flush=True)
    finally:
        left = job.cleanup()
        if left:
            fault.say("cleanup stopped: " + "; ".join(left[:6]))
        fault.out.runs = len(job.records())
        fault.out.took = time.monotonic() - t0
    return fault.out


def report(seed: int, outs: list[Outcome], took: float, nodes: int) -> str:
    kinds = Counter(o.plan.kind for o in outs)
    bad = [(o, v) for o in outs for v in o.violations]
    by_inv = Counter(v.invariant for _, v in bad)
    lines = [
        f"chaos: seed {seed}, {len(outs)} faults on {nodes} fake nodes in {took:.0f}s",
        f"runs: {sum(o.runs for o in outs)} run records in {len(outs)} chains",
        "faults by kind: " + ", ".join(f"{k} {c}" for k, c in sorted(kinds.items())),
        f"violations: {len(bad)}"
        + (" (" + ", ".join(f"{k} {c}" for k, c in by_inv.most_common()) + ")" if bad else ""),
    ]
    lines += kind_table(outs) if any(o.times for o in outs) else []
    for o, v in bad:
        lines.append(f"VIOLATION {o.plan.describe()} job {o.job}: {v.line()}")
    for o in outs:
        if o.error:
            lines.append(f"HARNESS ERROR {o.plan.describe()} job {o.job}: {o.error}")
    return "\n".join(lines)


def kind_table(outs: list[Outcome]) -> list[str]:
    """Per kind: faults, violations, harness errors, and each measured time (seconds from
    the fault to the decision, to the job down, to a sentinel's lost.json): median, max."""
    lines = ["kind                  faults  violations  errors  times (median / max s)"]
    for kind in sorted({o.plan.kind for o in outs}):
        mine = [o for o in outs if o.plan.kind == kind]
        names = sorted({t for o in mine for t in o.times})
        times = []
        for t in names:
            vals = sorted(o.times[t] for o in mine if t in o.times)
            times.append(f"{t} {vals[len(vals) // 2]:.1f}/{vals[-1]:.1f} (n={len(vals)})")
        lines.append(f"{kind:<21} {len(mine):>6}  {sum(len(o.violations) for o in mine):>10}  "
                     f"{sum(1 for o in mine if o.error):>6}  {', '.join(times) or '-'}")  # fmt: skip
    return lines


def as_json(seed: int, outs: list[Outcome], took: float) -> dict[str, object]:
    return {"seed": seed, "took_s": round(took, 1), "faults": [asdict(o) for o in outs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=3, help="fake nodes; the last is the spare")
    ap.add_argument("--kinds", default="", help="comma-separated; default: every kind that "
                    "runs in one of --profiles")  # fmt: skip
    ap.add_argument("--profiles", default=",".join(LOCAL), help="plain, restart, spare; "
                    "cluster (the watch on the cluster, its own kinds)")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, help="write every fault's outcome here")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs, records)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    profiles = [Profile(p) for p in args.profiles.split(",") if p]
    kinds = [k for k in args.kinds.split(",") if k] or [
        k for k in KINDS if set(PROFILES.get(k, LOCAL)) & set(profiles)
    ]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or args.nodes < 2 or args.faults < 1:
        ap.error(f"unknown kind(s) {unknown}; kinds: {', '.join(KINDS)}" if unknown
                 else "--nodes at least 2, --faults at least 1")  # fmt: skip
    plans = draw(seed, args.faults, kinds, profiles, args.nodes)
    root = Path(tempfile.mkdtemp(prefix="mntui-chaos-"))
    isolate(root)
    print(f"chaos: seed {seed}, {args.faults} faults, work dir {root}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    fc = FakeCluster(root / "cluster", args.nodes).start()
    outs: list[Outcome] = []
    try:
        for plan in plans:
            outs.append(run_fault(fc, root, plan))
    finally:
        fc.stop()
        subprocess.run(["tmux", "kill-server"], capture_output=True)  # our own, isolated
        took = time.monotonic() - t0
        if args.json:
            args.json.write_text(json.dumps(as_json(seed, outs, took), indent=2, default=str))
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(report(seed, outs, took, args.nodes))
    return 1 if any(o.violations or o.error for o in outs) else 0


if __name__ == "__main__":
    sys.exit(main())
