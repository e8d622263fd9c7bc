"""The straggler campaign (issue 40): how soon the cluster's watch names a slow rank or node,
and that it names nobody in clean runs, on real sshd nodes with real torchrun.

    .venv/bin/python bench/stragglers.py                 # 20 stragglers, 10 clean runs of 5 min
    .venv/bin/python bench/stragglers.py --lanes 2       # the same, clean runs 2 at once
    .venv/bin/python bench/stragglers.py --stragglers 8 --clean 4 --clean-seconds 120
    .venv/bin/python bench/stragglers.py --quick         # the suite's: 1 + 1, under ~60 s
    git worktree add /tmp/before 1ed8006 && .venv/bin/python bench/stragglers.py --tree /tmp/before

Every run is a fresh tests/jobs/straggler_train.py job (gloo, CPU, one rank a node) on
fake sshd nodes (tests/fakecluster.py), launched with `mntui launch --no-ui` and watched
by the cluster alone (`watch.where: cluster`, every other watch setting its default): the
sentinels record their ranks with py-spy, the coordinator on the main names the
straggler. Nothing of the job's code changes for it. A straggler is injected:

- by work: one rank computes 2x or 1.5x longer a step (`--slow-factor`), from its first
  step or from `--mid-after` seconds in (`--slow-after`; the rank prints when);
- by a CPU quota: the node's processes (its sshd, tmux server, ranks and watchers) moved
  into a cgroup v1 `cpu` child whose `cpu.cfs_quota_us` is 1/2 or 1/1.5 of a CPU, before
  the launch or `--mid-after` seconds in; the ranks burn the CPU (`--kind cpu`). Needs a
  writable /sys/fs/cgroup/cpu (else those runs are made by work, and the table says so);

on the main (node0) or the worker (node1). The clean runs are balanced but uneven: plain,
a rank that logs 20 lines more a step, a rank whose step stalls once for `--stall` s.

The latency is from the onset (the first step, for a straggler slow from the start; the
quota's move or the rank's "slow from" line, mid-run) to the first line that names it:
the coordinator's journal entry (`straggler`), which `status`, the app and the report
say in the same words (checked: `mntui status` after each naming shows that line). A
run ends at the naming or `--limit` s after the onset (a miss). Printed: every run,
then the median and worst latency per slowdown, precision (namings that named the slow
node) and recall (stragglers named), and each node's sentinel CPU (its own and its
py-spy children's, per second of the run); then the sampling's cost (clean runs with it
and without it); with `--pairs`, `doctor --pairs` on a node at a tenth of a CPU.
`--tree` measures another checkout's mntui the same way (today's figures before a
change: its launch ships its own node package). Writes
bench/results/stragglers-<stamp>.json (not with --quick).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import straggle  # noqa: E402
from clusterwatch import watchers  # noqa: E402
from fakecluster import FakeCluster, free_port, wait_for  # noqa: E402

WORK = 0.1  # seconds a step computes
SHARES = 262144  # cgroup v1's most cpu.shares: the job's nodes first, whatever else runs
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Case:
    how: str  # "work", "quota" or "clean"
    factor: float = 1.0
    slow: int | None = None  # the slow node's index (0: the main)
    mid: bool = False  # turned slow mid-run
    variant: str = "plain"  # a clean run's: plain, chatty, stall

    @property
    def label(self) -> str:
        if self.slow is None:
            return f"clean, {self.variant}"
        who = "main" if self.slow == 0 else "worker"
        when = "mid-run" if self.mid else "from the start"
        return f"{self.factor:g}x {who} by {self.how}, {when}"


@dataclass
class Outcome:
    case: Case
    label: str
    onset: float | None = None  # wall clock
    named_node: str | None = None
    named_rank: int | None = None
    latency: float | None = None  # onset to the first naming
    line: str = ""  # the journal's
    status_line: str = ""  # `mntui status`'s, after the naming
    cpu: dict[str, float] = field(default_factory=dict)  # node -> sentinel CPU %
    shares: str = ""  # each rank's wait share in the finding at the end: the evidence
    step: float | None = None  # seconds a step after the onset (or all along: clean)
    slowdown: float | None = None  # that against a step before the onset (mid-run)
    seconds: float = 0.0
    note: str = ""

    @property
    def right(self) -> bool:
        return self.case.slow is not None and self.named_node == f"node{self.case.slow}"


def plan(stragglers: int, clean: int, quota: bool, kinds: str = "work,quota") -> list[Case]:
    """Every slowdown x who x when x how (16), in an order drawn once (a shorter campaign
    still mixes them), repeated to `stragglers`, then the clean runs; the quota's runs
    are made by work where no cgroup can be written."""
    combos = [
        Case(how, factor, slow, mid)
        for how in ("work", "quota")
        for mid in (False, True)
        for slow in (1, 0)
        for factor in (2.0, 1.5)
    ]
    random.Random(40).shuffle(combos)
    combos = [c for c in combos if c.how in kinds.split(",")]
    out = [combos[i % len(combos)] for i in range(stragglers if combos else 0)]
    if not quota:
        out = [Case("work", c.factor, c.slow, c.mid) for c in out]
    variants = ("plain", "chatty", "stall")
    return out + [Case("clean", variant=variants[i % 3]) for i in range(clean)]


def job_args(case: Case, mid_after: float, stall: float) -> str:
    kind = "cpu" if case.how == "quota" else "sleep"
    args = f"--work {WORK} --kind {kind}"
    if case.how == "work" and case.slow is not None:
        args += f" --slow-rank {case.slow} --slow-factor {case.factor}"
        args += f" --slow-after {mid_after}" if case.mid else ""
    if case.variant == "chatty":
        args += " --chatty-rank 1"
    if case.variant == "stall":
        args += f" --stall-rank 1 --stall-at {mid_after} --stall-for {stall}"
    return args


def write_job(
    fake: FakeCluster, root: Path, job: str, nodes: list[str], args: str, watch_extra: str = ""
) -> Path:
    work = root / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(straggle.JOB_SCRIPT, work)
    watch = f"where: cluster, port: {free_port()}{watch_extra}"
    body = straggle.job_yaml(job, nodes, free_port(), work, args, watch)
    path = root / f"{job}.yaml"
    path.write_text(
        textwrap.dedent(body).strip()
        + f"\nssh: {{config: {fake.ssh_config}, connect_timeout: 5}}\n"
    )
    return path


TREE: dict[str, str] = {}  # the environment that runs another tree's mntui (--tree)


def mntui(path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, **TREE},
    )  # fmt: skip


def use_tree(tree: Path, root: Path) -> None:
    """Every `mntui` of the campaign from the checkout at `tree` (its sessions/, tui/
    and configs/, whose node package is what the launch ships): a directory of links
    first on PYTHONPATH, ahead of this venv's editable install (which Python asks last).
    The job and the harness stay this tree's."""
    shim = root / "tree" / "mntui"
    shim.mkdir(parents=True)
    for part in ("sessions", "tui", "configs"):
        (shim / part).symlink_to(tree.resolve() / part)
    TREE["PYTHONPATH"] = str(shim.parent)


def stamps(log: str, word: str) -> list[float]:
    """The wall clocks of the job's `<word> ... t T` lines (step, slow from)."""
    out = []
    for line in log.splitlines():
        parts = line.split()
        if parts and parts[0] == word and len(parts) >= 3 and parts[-2] == "t":
            with contextlib.suppress(ValueError):
                out.append(float(parts[-1]))
    return out


def named(fake: FakeCluster, job: str, main: str) -> dict[str, object] | None:
    """The coordinator's first `straggler` journal entry, or None."""
    dirs = fake.node(main).run_dirs(job)
    path = dirs[-1] / "coord" / "journal.jsonl" if dirs else None
    try:
        text = path.read_text() if path is not None else ""
    except OSError:
        return None
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("kind") == "straggler":
                return entry
    return None


def shares(fake: FakeCluster, job: str, main: str) -> str:
    """Each rank's wait share and samples in the coordinator's finding, as it is now."""
    dirs = fake.node(main).run_dirs(job)
    try:
        data = json.loads((dirs[-1] / "coord" / "straggler.json").read_text())
        ranks = data["finding"]["ranks"]
        return " ".join(f"{r['rank']}:{r['waits']}/{r['samples']}" for r in ranks)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return ""


def paced(out: Outcome, times: list[float], first: float) -> None:
    """What the injection did to the job: its step time since the onset (until the
    naming, or all along), against the 20 s before a mid-run onset."""

    def step(a: float, b: float) -> float | None:
        within = [t for t in times if a <= t <= b]
        return (within[-1] - within[0]) / (len(within) - 1) if len(within) > 2 else None

    onset = out.onset if out.onset is not None else first
    until = onset + out.latency if out.latency is not None else time.time()
    out.step = step(onset, until)
    before = step(onset - 20.0, onset) if out.case.mid else None
    if out.step is not None and before:
        out.slowdown = out.step / before


def cpu_seconds(pid: int) -> float | None:
    """A process's CPU, its reaped children's (its py-spy records) included."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime


def node_pids(fake: FakeCluster, node: str) -> list[int]:
    return [straggle.sshd_pid(fake, node), *fake.node(node).pids()]


@contextlib.contextmanager
def slowed(fake: FakeCluster, case: Case, nodes: list[str], name: str) -> Iterator[Path | None]:
    """The quota's cgroup (a quota run), the node moved into it now unless mid-run; every
    node of the job weighted to get its CPU first (cpu.shares; the slow one too, until
    its quota), as on an idle host: the host's other load must not make a straggler of
    a node, nor hide the quota's."""
    if case.how != "quota" or case.slow is None:
        yield None
        return
    slow = f"node{case.slow}"
    with (
        straggle.cpu_quota(None, None, f"{name}fast", shares=SHARES) as fast,
        straggle.cpu_quota(None, 1 / case.factor, name, shares=SHARES) as group,
    ):
        for n in nodes:
            straggle.move_into(group if n == slow and not case.mid else fast, node_pids(fake, n))
        yield group


def run_case(fake: FakeCluster, root: Path, i: int, case: Case, nodes: list[str],
             opts: argparse.Namespace) -> Outcome:  # fmt: skip
    job = f"strag{i}"
    out = Outcome(case, case.label)
    path = write_job(fake, root, job, nodes, job_args(case, opts.mid_after, opts.stall))
    t0 = time.monotonic()
    with slowed(fake, case, nodes, f"bench{i}") as group:
        res = mntui(path, "launch", "--no-ui")
        if res.returncode != 0:
            out.note = f"launch failed: {(res.stdout + res.stderr)[-300:]}"
            return out
        try:
            watch_case(fake, job, path, case, nodes, group, out, opts)
        finally:
            mntui(path, "kill")
    out.seconds = time.monotonic() - t0
    return out


def watch_case(fake: FakeCluster, job: str, path: Path, case: Case, nodes: list[str],
               group: Path | None, out: Outcome, opts: argparse.Namespace) -> None:  # fmt: skip
    logs = {n: (lambda n=n: fake.node(n).log(job)) for n in nodes}
    wait_for(lambda: all(stamps(get(), "step") for get in logs.values()), 120, what="training")
    first = min(stamps(get(), "step")[0] for get in logs.values())
    sentinels = {n: watchers(job, "sentinel", n) for n in nodes}
    cpu0 = {n: (time.monotonic(), cpu_seconds(p[0])) for n, p in sentinels.items() if p}
    if case.slow is not None and case.mid:
        slow = f"node{case.slow}"
        if group is not None:  # the quota from now on, on every process of the node
            wait_for(lambda: time.time() >= first + opts.mid_after, opts.mid_after + 5,
                     interval=0.2, what="the mid-run onset")  # fmt: skip
            straggle.move_into(group, node_pids(fake, slow))
            out.onset = time.time()
        else:
            wait_for(lambda: stamps(logs[slow](), "slow"), opts.mid_after + 60, what="slow from")
            out.onset = stamps(logs[slow](), "slow")[0]
    elif case.slow is not None:
        out.onset = first
    limit = opts.limit if case.slow is not None else opts.clean_seconds
    start = out.onset if out.onset is not None else first
    entry = None
    while time.time() < start + limit and entry is None:
        entry = named(fake, job, nodes[0])
        time.sleep(0.25)
    out.shares = shares(fake, job, nodes[0])
    if entry is not None and out.onset is not None:
        out.latency = float(entry.get("t", 0.0)) - out.onset  # type: ignore[arg-type]
    paced(out, stamps(logs[nodes[0]](), "step"), first)
    if opts.keep is not None:  # the coordinator's files of the run, to look into after
        dirs = fake.node(nodes[0]).run_dirs(job)
        if dirs:
            shutil.copytree(dirs[-1] / "coord", opts.keep / job, dirs_exist_ok=True)
    for n, (m0, c0) in cpu0.items():
        c1 = cpu_seconds(sentinels[n][0])
        if c0 is not None and c1 is not None:
            out.cpu[n] = 100 * (c1 - c0) / (time.monotonic() - m0)
    if entry is None:
        return
    data = entry.get("data") if isinstance(entry.get("data"), dict) else {}
    assert isinstance(data, dict)
    out.named_node, out.named_rank = str(entry.get("node")), data.get("rank")  # type: ignore[assignment]
    out.line = str(data.get("line", ""))
    status = mntui(path, "status").stdout.splitlines()
    out.status_line = next((x for x in status if x.startswith("straggler: ")), "")


def cost(fake: FakeCluster, root: Path, seconds: float) -> list[str]:
    """What the straggler's sampling costs a node: its sentinel's CPU (with its py-spy
    records) in a clean run sampled at the default against one not sampled at all, in
    ABBA order; and today's old way, a py-spy dump of a rank every 10 s, by its CPU."""
    import resource

    from clusterwatch import a_rank

    cpu: dict[str, list[float]] = {"default": [], "off": []}
    dump: list[float] = []
    for k, name in enumerate(("default", "off", "off", "default")):
        job = f"stragcost{k}"
        extra = ", sample_every: 0" if name == "off" else ""
        path = write_job(fake, root, job, ["node0", "node1"], f"--work {WORK}", extra)
        if mntui(path, "launch", "--no-ui").returncode != 0:
            continue
        try:
            out = Outcome(Case("clean"), "cost")
            opts = argparse.Namespace(
                clean_seconds=seconds, mid_after=0.0, limit=seconds, keep=None
            )
            watch_case(fake, job, path, Case("clean"), ["node0", "node1"], None, out, opts)
            cpu[name] += out.cpu.values()
            spy = shutil.which("py-spy") or shutil.which(
                "py-spy", path=str(Path(sys.executable).parent)
            )
            if name == "off" and spy and not dump:
                pid = a_rank(job, "node1")
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                for _ in range(5):
                    subprocess.run([spy, "dump", "--json", "--nonblocking", "--pid", str(pid)],
                                   capture_output=True, timeout=30)  # fmt: skip
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                dump.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / 5)
        finally:
            mntui(path, "kill")
    rows = ["", "| a node's sentinel (one rank) | runs | CPU % of a core, median (min–max) |",
            "|---|---:|---:|"]  # fmt: skip
    for name, xs in cpu.items():
        if xs:
            rows.append(f"| sampling {name} | {len(xs)} | {statistics.median(xs):.2f} "
                        f"({min(xs):.2f}–{max(xs):.2f}) |")  # fmt: skip
    if cpu["default"] and cpu["off"]:
        extra = statistics.median(cpu["default"]) - statistics.median(cpu["off"])
        rows.append(f"\nThe sampling costs {extra:.2f} % of a core per rank.")
    if dump:
        rows.append(f"Today's way before issue 40 (a py-spy dump of each rank every 10 s): "
                    f"{1000 * dump[0]:.1f} ms a dump, {dump[0] * 10:.2f} % of a core per rank.")  # fmt: skip
    return rows


def doctor_pairs(root: Path, quota: float | None) -> tuple[str, float, bool]:
    """`doctor --pairs` on 4 fresh nodes, node2 at `quota` of a CPU (None: clean): the
    pre-launch check of a slow node, by the same quota."""
    with FakeCluster(root / f"pairs{quota}", 4).start() as fake:
        t0 = time.monotonic()
        res = straggle.doctor_pairs(fake, root / "pairs.yaml", quota)
        took = time.monotonic() - t0
    line = next((x for x in res.stdout.splitlines() if x.startswith("pairs: ")), "no line")
    named_only_node2 = "node2 is slow" in line and line.count(" is slow") == 1
    right = named_only_node2 if quota else "no slow node" in line
    return line, took, right


def pairs_rows(root: Path) -> list[str]:
    rows = ["", "| doctor --pairs, 4 nodes | right | s | its line |", "|---|---|---:|---|"]
    for quota in (0.1, 0.1, None):
        line, took, right = doctor_pairs(root, quota)
        what = f"node2 at {quota:g} CPU" if quota else "clean"
        rows.append(f"| {what} | {'yes' if right else 'NO'} | {took:.0f} | {line} |")
        print(rows[-1], flush=True)
    return rows


def batches(cases: list[Case], lanes: int) -> list[list[int]]:
    """The runs in order, a straggler's alone (its quota and its latency want the host
    to itself), the clean runs `lanes` at once."""
    clean = [i for i, c in enumerate(cases) if c.slow is None]
    alone = [[i] for i, c in enumerate(cases) if c.slow is not None]
    return alone + [clean[k : k + max(1, lanes)] for k in range(0, len(clean), max(1, lanes))]


def lanes_at_once(fake: FakeCluster, root: Path, cases: list[Case], batch: list[int],
                  outs: list[Outcome], opts: argparse.Namespace) -> None:  # fmt: skip
    """The runs of `batch` at once, the k-th on nodes 2k and 2k+1 (a straggler's runs
    alone: a batch of one): clean runs side by side load the host more than one alone,
    which makes a false alarm likelier, not rarer."""

    def one(k: int, i: int) -> None:
        outs[i] = run_case(fake, root, i, cases[i], [f"node{2 * k}", f"node{2 * k + 1}"], opts)

    threads = [threading.Thread(target=one, args=(k, i)) for k, i in enumerate(batch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in batch:
        o = outs[i]
        print(f"{i}: {o.label}: named {o.named_node} after {o.latency} s: {o.line} "
              f"[waits {o.shares}] {o.note}", flush=True)  # fmt: skip


def spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.1f} (worst {max(xs):.1f}, n={len(xs)})"


def said_alike(status: str, journal: str) -> bool:
    """`status`'s line is the journal's: the same rank, node, step times and onset; the
    shares may have moved on since (status shows the finding's latest evidence)."""
    shares = re.compile(r" waits \d+ % of the time, the others? [\d–]+ %")
    return shares.sub("", status) == shares.sub("", f"straggler: {journal}")


def table(outs: list[Outcome]) -> list[str]:
    rows = ["| # | run | step s (slowdown) | latency s | named | right | status says it | "
            "sentinel CPU % |", "|---:|---|---:|---:|---|---|---|---|"]  # fmt: skip
    for k, o in enumerate(outs):
        lat = f"{o.latency:.1f}" if o.latency is not None else "-"
        who = f"rank {o.named_rank} ({o.named_node})" if o.named_node else "nobody"
        if o.case.slow is None:
            right = "yes" if o.named_node is None else "**FALSE ALARM**"
        else:
            right = "yes" if o.right else "**missed**" if o.named_node is None else "**wrong**"
        same = "-" if not o.line else "yes" if said_alike(o.status_line, o.line) else "NO"
        cpu = " ".join(f"{v:.2f}" for _, v in sorted(o.cpu.items()))
        note = f" ({o.note})" if o.note else ""
        pace = f"{o.step:.3f}" if o.step is not None else "-"
        pace += f" ({o.slowdown:.2f}x)" if o.slowdown is not None else ""
        rows.append(
            f"| {k} | {o.label}{note} | {pace} | {lat} | {who} | {right} | {same} | {cpu} |"
        )
    slow = [o for o in outs if o.case.slow is not None]
    said = [o for o in outs if o.named_node is not None]
    rows.append("")
    for factor in sorted({o.case.factor for o in slow}, reverse=True):
        lats = [o.latency for o in slow if o.case.factor == factor and o.right and o.latency]
        rows.append(f"- {factor:g}x: latency median {spread([x for x in lats if x is not None])}")
    for key in ("main", "worker"):
        lats = [o.latency for o in slow if o.right and o.latency is not None
                and (o.case.slow == 0) == (key == "main")]  # fmt: skip
        rows.append(f"- {key}: latency median {spread(lats)}")
    for mid in (False, True):
        lats = [o.latency for o in slow if o.right and o.latency is not None and o.case.mid == mid]
        rows.append(f"- {'mid-run' if mid else 'from the start'}: latency median {spread(lats)}")
    right = sum(o.right for o in slow)
    rows.append(
        f"- precision {right}/{len(said)} (namings of the slow node), recall {right}/{len(slow)} "
        f"(stragglers named), false alarms {sum(o.case.slow is None for o in said)} in "
        f"{sum(o.case.slow is None for o in outs)} clean runs"
    )
    cpus = [v for o in outs for v in o.cpu.values()]
    if cpus:
        rows.append(f"- a node's sentinel, with its py-spy records: median {statistics.median(cpus):.2f} "
                    f"% of a core (max {max(cpus):.2f} %), one rank a node")  # fmt: skip
    return rows


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the suite's: 1 straggler, 1 clean")
    ap.add_argument("--stragglers", type=int, default=20)
    ap.add_argument("--clean", type=int, default=10)
    ap.add_argument("--clean-seconds", type=float, default=300.0)
    ap.add_argument("--mid-after", type=float, default=60.0, help="s of training before onset")
    ap.add_argument("--limit", type=float, default=120.0, help="s after onset: a miss")
    ap.add_argument("--stall", type=float, default=5.0, help="s a clean run's rank stalls once")
    ap.add_argument("--cost-seconds", type=float, default=60.0, help="s of each cost run (0: none)")
    ap.add_argument("--how", default="work,quota", help="how stragglers are made")
    ap.add_argument("--pairs", action="store_true", help="and doctor --pairs on a quota")
    ap.add_argument("--keep", type=Path, help="keep each run's coord/ files here")
    ap.add_argument("--only", help="the runs whose label holds one of these (a;b)")
    ap.add_argument(
        "--lanes", type=int, default=1, help="clean runs this many at once, each on its own 2 nodes"
    )
    ap.add_argument("--tree", type=Path, help="measure the mntui of this checkout (a baseline)")
    opts = ap.parse_args()
    if opts.quick:
        opts.stragglers, opts.clean, opts.clean_seconds = 1, 1, 25.0
        opts.mid_after, opts.limit, opts.cost_seconds = 5.0, 45.0, 0.0
    return opts


def main() -> int:
    opts = parse()
    root = Path(tempfile.mkdtemp(prefix="mntui-stragglers-"))
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    if opts.tree is not None:
        use_tree(opts.tree, root)
    quota = straggle.can_throttle()
    cases = plan(opts.stragglers, opts.clean, quota, opts.how)
    if opts.only:
        cases = [c for c in cases if any(w in c.label for w in opts.only.split(";"))]
    if opts.quick:
        cases = [Case("work", 2.0, 1, True), Case("clean", variant="chatty")]
    tree = f"; mntui of {opts.tree}" if opts.tree else ""
    print(f"{len(cases)} runs; load {os.getloadavg()[0]:.2f}; cgroup quota: {quota}{tree}",
          flush=True)  # fmt: skip
    outs: list[Outcome] = []
    t0 = time.monotonic()
    try:
        nodes = 4 if opts.quick else 2 * max(1, opts.lanes)
        with FakeCluster(root / "fake", nodes).start() as fake:
            outs = [Outcome(c, c.label) for c in cases]
            for batch in [[0, 1]] if opts.quick else batches(cases, opts.lanes):
                lanes_at_once(fake, root, cases, batch, outs, opts)
            costs = cost(fake, root, opts.cost_seconds) if opts.cost_seconds > 0 else []
        if opts.pairs and quota:
            costs += pairs_rows(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = table(outs) + costs
    print("\n".join(rows))
    print(f"\n{len(outs)} runs in {time.monotonic() - t0:.0f} s; load {os.getloadavg()[0]:.2f}")
    if not opts.quick:
        results = REPO / "bench" / "results"
        results.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        data = {"outcomes": [{**asdict(o), "right": o.right} for o in outs], "table": rows}
        (results / f"stragglers-{stamp}.json").write_text(json.dumps(data, indent=1))
    slow = [o for o in outs if o.case.slow is not None]
    false = [o for o in outs if o.case.slow is None and o.named_node is not None]
    return 0 if all(o.right for o in slow) and not false else 1


if __name__ == "__main__":
    sys.exit(main())
