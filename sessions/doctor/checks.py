"""The doctor's verdicts: what one node's probe (and the nodes side by side) mean.

Pure functions from parsed probes to rows, one per concern, so each verdict is tested
without a node and a new check is a new function, not a new branch in a long loop.
Each row says what was found and, when it is not a pass, what to do about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.errors import ExitCode


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Check:
    node: str
    check: str
    status: Status
    detail: str
    fix: str = ""
    # A failure of the node itself (unreachable, its network, its all-reduce), not of
    # the config or the job's environment: only these count against it in its history.
    node_fault: bool = False


def verdict(node: str, check: str, ok: bool, detail: str, fix: str, bad: Status) -> Check:
    """A pass carries no fix; anything else carries the fix, at the given severity."""
    return Check(node, check, Status.PASS, detail) if ok else Check(node, check, bad, detail, fix)


@dataclass(frozen=True)
class Git:
    commit: str
    dirty: int  # uncommitted changes


@dataclass(frozen=True)
class Python:
    version: str
    torch: str | None
    torch_error: str | None
    cuda: bool
    cuda_version: str | None
    gpus: int
    nccl: str | None


@dataclass(frozen=True)
class Probe:
    """One node's answers; None where the node gave none (or none that could be read)."""

    tmux: str | None = None
    session: bool = False  # the job's tmux session exists
    procs: int = 0  # processes of an earlier run
    holders: tuple[str, ...] = ()  # who holds the job's ports (the main only)
    resolved: str | None = None  # what MASTER_ADDR resolves to here
    addrs: tuple[str, ...] = ()
    ifaces: Mapping[str, str] = field(default_factory=dict)  # name -> operstate
    workdir: str | None = None  # the directory the job would start in
    workdir_missing: bool = False
    disk_kib: int | None = None
    git: Git | None = None
    python: Python | None = None
    python_raw: bool = False  # python3 answered, but not with a readable report
    malformed: int = 0  # lines with our marker but not in their exact shape
    pyspy: str | None = None  # where py-spy is, after `setup`
    ptrace_scope: int | None = None  # kernel.yama.ptrace_scope; None: no Yama
    root: bool = False
    setup_status: int | None = None  # `setup`'s exit status (its last line's)
    setup_err: str | None = None  # what `setup` printed on stderr, bounded and stripped
    sentinel_python: str | None = None  # `python3 -I -S`'s major.minor on the login PATH
    # what the cluster's sentinel runs on: `python3`, the path of setup's, None: nothing
    sentinel_runs_on: str | None = None


def tmux_check(n: str, p: Probe) -> Check:
    found = p.tmux is not None and p.tmux.startswith("tmux")
    return verdict(n, "tmux", found, p.tmux or "missing", "install tmux on the node", Status.FAIL)


def workdir_check(n: str, p: Probe, spec: NodeSpec) -> Check:
    if p.workdir is None:
        if p.workdir_missing:
            return Check(
                n,
                "workdir",
                Status.FAIL,
                f"{spec.workdir} does not exist",
                "create it or fix `workdir`",
            )
        return Check(n, "workdir", Status.FAIL, "the probe did not get past `setup`", "fix `setup`")
    gib = (p.disk_kib or 0) / 2**20
    detail = (
        f"{p.workdir}, {gib:.1f} GiB free"
        if p.disk_kib is not None
        else f"{p.workdir}, free space unknown"
    )
    return verdict(n, "workdir", gib > 5, detail, "free disk space", Status.WARN)


def setup_check(n: str, p: Probe, spec: NodeSpec) -> Check | None:
    """What `setup` said on stderr: a `source` of a venv that is not there shows here,
    not only as the `No module named 'torch'` that follows it. Noise on stderr with a
    zero status passes (module systems print there), but is shown."""
    if not spec.setup or p.setup_status is None:
        return None
    said = f": {p.setup_err}" if p.setup_err else ""
    if p.setup_status != 0:
        detail = f"exited with {p.setup_status}{said}"
        return Check(n, "setup", Status.FAIL, detail, "fix `setup` (it runs in the workdir)")
    return Check(
        n,
        "setup",
        Status.PASS,
        f"ran, printed on stderr{said}" if said else "ran, nothing on stderr",
    )


def python_check(n: str, p: Probe, nproc_per_node: int) -> Check:
    py = p.python
    if py is None:
        what = "python3 gave no readable report" if p.python_raw else "python3 not found"
        return Check(n, "python", Status.FAIL, f"{what} after `setup`", "fix `setup`")
    if py.torch is None:
        return Check(
            n,
            "torch",
            Status.FAIL,
            f"python {py.version}: {py.torch_error or 'torch not found'}",
            "install torch in the job's environment, or fix `setup`",
        )
    enough = not py.cuda or py.gpus >= nproc_per_node
    detail = (
        f"python {py.version}, torch {py.torch}, cuda {py.cuda_version} ({py.gpus} GPUs), "
        f"nccl {py.nccl}"
    )
    return verdict(n, "torch", enough, detail, f"nproc_per_node is {nproc_per_node}", Status.FAIL)


def git_check(n: str, g: Git) -> Check:
    detail = g.commit[:12] + (f", {g.dirty} uncommitted change(s)" if g.dirty else "")
    return verdict(n, "git", not g.dirty, detail, "commit or stash", Status.WARN)


def stacks_check(n: str, p: Probe) -> Check:
    """The failure report's stacks of hung ranks need py-spy in the job's environment
    and a kernel that lets the user read its own processes."""
    fix = "pip install py-spy into the job's environment (the report then shows hung stacks)"
    if p.pyspy is None:
        return Check(n, "stacks", Status.WARN, "py-spy not found after `setup`", fix)
    scope = p.ptrace_scope or 0
    if scope >= 2 or (scope == 1 and not p.root):
        why = f"kernel.yama.ptrace_scope is {scope}: py-spy cannot read the job's processes"
        return Check(n, "stacks", Status.WARN, why, "sysctl kernel.yama.ptrace_scope=0")
    return Check(n, "stacks", Status.PASS, f"py-spy at {p.pyspy}")


def sentinel_check(n: str, p: Probe) -> Check:
    """The cluster's watch runs a sentinel on the node's own python3 (3.9 or later), or
    else on the one the job's `setup` provides (by its path, outside the job's
    environment): the launch's rule (sentinelship.sentinel_python). A node with
    neither refuses the launch, which the row says in the launch's words
    (clusterwatch.python_unfit, FIX)."""
    from mntui.sessions.launch.clusterwatch import FIX, python_unfit

    v, runs_on = p.sentinel_python, p.sentinel_runs_on
    version = (int(v.split(".")[0]), int(v.split(".")[1])) if v is not None else None
    why = python_unfit(version, runs_on is not None)
    if why is not None:
        return Check(n, "sentinel", Status.FAIL, f"{why}: the launch refuses", FIX)
    if runs_on not in (None, "python3"):
        bare = f"python3 {v}" if v is not None else "no python3"
        said = f"{bare} on the login PATH; {runs_on} (after `setup`) runs the cluster's watch"
        return Check(n, "sentinel", Status.PASS, said)
    return Check(n, "sentinel", Status.PASS, f"python3 {v} runs the cluster's watch")


def node_checks(n: str, p: Probe, spec: NodeSpec, cfg: JobConfig) -> list[Check]:
    """tmux, then the workdir; python and git only where the workdir was reached."""
    rows = [tmux_check(n, p), workdir_check(n, p, spec)]
    if cfg.watch_port is not None:  # the cluster would watch this config
        rows.append(sentinel_check(n, p))
    if p.workdir is None:
        return rows
    rows += [c for c in (setup_check(n, p, spec),) if c is not None]
    rows.append(python_check(n, p, cfg.nproc(spec)))  # a hostfile's slots differ by node
    rows.append(stacks_check(n, p))
    if p.git is not None:
        rows.append(git_check(n, p.git))
    return rows


def consistency_checks(probes: Mapping[str, Probe]) -> list[Check]:
    """torch versions and commits must agree across the nodes that reported them."""
    rows: list[Check] = []
    torch = {n: p.python.torch for n, p in probes.items() if p.python and p.python.torch}
    if len(set(torch.values())) > 1:
        differ = ", ".join(f"{k}={v}" for k, v in torch.items())
        rows += [
            Check(
                n,
                "versions",
                Status.FAIL,
                f"torch {v}; nodes differ: {differ}",
                "use one environment",
            )
            for n, v in torch.items()
        ]
    commits = {n: p.git.commit for n, p in probes.items() if p.workdir and p.git}
    if len(set(commits.values())) > 1:
        rows += [
            Check(n, "code", Status.FAIL, f"commit {c[:12]}; nodes differ", "sync the code")
            for n, c in commits.items()
        ]
    return rows


def master_addr_checks(addr: str, main: str, probes: Mapping[str, Probe]) -> list[Check]:
    """Every node must resolve MASTER_ADDR as the main does, to an address of the main."""
    rows: list[Check] = []
    main_view = probes[main].resolved if main in probes else None
    for n, p in probes.items():
        if not p.resolved:
            fix = "fix DNS / /etc/hosts, or set master_addr to an IP"
            rows.append(Check(n, "master_addr", Status.FAIL, f"{addr} does not resolve here", fix))
        elif n != main and main_view and p.resolved != main_view:
            rows.append(
                Check(
                    n,
                    "master_addr",
                    Status.FAIL,
                    f"{addr} -> {p.resolved} here, but {main_view} on the main",
                    "fix DNS / /etc/hosts on this node, or set master_addr to an IP",
                )
            )
        else:
            rows.append(Check(n, "master_addr", Status.PASS, f"{addr} -> {p.resolved}"))
    addrs = probes[main].addrs if main in probes else ()
    if main_view and main_view not in addrs and not main_view.startswith("127."):
        rows.append(
            Check(
                main,
                "master_addr",
                Status.FAIL,
                f"{addr} -> {main_view}, not an address of the main ({' '.join(addrs)})",
                "master_addr must name the main itself",
            )
        )
    return rows


def wanted_ifnames(spec: NodeSpec) -> list[str]:
    """The interface specs the job will run with: taken from the config here, never echoed
    back by a node's shell, so a value is never shell code."""
    return [v for k, v in spec.env.items() if k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")]


def ifname_ok(want: str, have: Mapping[str, str]) -> tuple[bool, str]:
    """NCCL's syntax: comma-separated prefixes, `^` excludes, `=` exact."""
    spec = want.strip()
    exclude = spec.startswith("^")
    exact = spec.lstrip("^").startswith("=")
    names = [n for n in spec.lstrip("^").lstrip("=").split(",") if n]

    def match(i: str) -> bool:
        return any(i == n if exact else i.startswith(n) for n in names)

    hits = [i for i in have if (not match(i)) == exclude]
    up = [i for i in hits if have[i] in ("up", "unknown")]
    if not hits:
        return False, f"no interface matches {spec!r} (have {', '.join(sorted(have))})"
    if not up:
        return False, f"{', '.join(hits)} match {spec!r} but none is up"
    return True, f"{', '.join(up)} up"


def ifname_checks(n: str, p: Probe, spec: NodeSpec) -> list[Check]:
    fix = "fix NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME"
    return [
        verdict(n, "ifname", *ifname_ok(want, p.ifaces), fix, Status.FAIL)
        for want in wanted_ifnames(spec)
    ]


def leftovers_check(n: str, p: Probe) -> Check:
    if not p.procs and not p.session:
        return Check(n, "leftovers", Status.PASS, "none")
    detail = f"{p.procs} process(es) of an earlier run" + (
        ", tmux session exists" if p.session else ""
    )
    return Check(n, "leftovers", Status.FAIL, detail, "mntui kill")


def clock_check(n: str, skew: float) -> Check:
    return verdict(
        n, "clock", abs(skew) <= 2, f"skew {skew:+.3f}s", "enable NTP/chrony", Status.WARN
    )


# cleanup kills the user's own holders only; another user's is named (by uid when its
# process is hidden from the node's user) and left alone.
PORTS_FIX = "mntui cleanup (frees your own; another user's: ask them, or change the ports)"


def ports_check(cfg: JobConfig, main: Probe) -> Check:
    if main.holders:
        return Check(cfg.main, "ports", Status.FAIL, "; ".join(main.holders), PORTS_FIX)
    return Check(cfg.main, "ports", Status.PASS, f"{', '.join(map(str, cfg.all_ports))} free")


def exit_code(rows: list[Check]) -> ExitCode:
    if any(r.status is Status.FAIL for r in rows):
        return ExitCode.DOCTOR_FAIL
    return ExitCode.DOCTOR_WARN if any(r.status is Status.WARN for r in rows) else ExitCode.OK


def format_rows(rows: list[Check]) -> str:
    head = ("NODE", "CHECK", "STATUS", "DETAIL")
    table = [head] + [
        (r.node, r.check, r.status.value, r.detail + (f"  -> {r.fix}" if r.fix else ""))
        for r in rows
    ]
    w = [max(len(t[i]) for t in table) for i in range(3)]
    return "\n".join(
        "  ".join(c.ljust(x) for c, x in zip(t[:3], w, strict=False)) + "  " + t[3] for t in table
    )
