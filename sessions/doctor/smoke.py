"""The doctor's live tests: a real TCP connection to the master port, and a real all-reduce.

Both start something on the nodes, so both end it, and end nothing else. The all-reduce
runs as a job of its own through the normal launch path, under a name no user job can
have: config validation refuses a job name that starts with `_`, so the smoke job's
preflight, tags, tmux sessions and kill can never meet a user's job (the old
`<job>-smoke` could be a real job, or be the job itself once cut to 64 characters).
Its result lines carry a random marker: a `setup` line cannot pass for a rank's result.
A node whose ranks gave no result has its log's first error named (node/classify.first_error):
a job that could not start there (no torch after `setup`) is the config's mistake, and
only a failure of the node itself counts against it in its history (`node_fault`).
"""

from __future__ import annotations

import json
import secrets
import shlex
import threading
import time
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

from mntui.sessions.config import JobConfig, ReadyMode
from mntui.sessions.errors import LaunchError
from mntui.sessions.events import Event, Phase
from mntui.sessions.launch import LineSplitter, LogChunk, Plan, kill_job, launch, read_new
from mntui.sessions.node.rules.classify import first_error
from mntui.sessions.results import NodeError
from mntui.sessions.ssh import Cluster, Node

from .checks import Check, Status, verdict

SMOKE_PREFIX = "_smoke-"  # `_` cannot start a user's job name (jobchecks.JOB_RE)
SMOKE_MARK = "MNTUI_SMOKE"
LOG_HEAD = 400  # lines of a node's smoke log kept for its first error

# -- tcp: every worker dials the main's master port -----------------------------------

LISTENER = """import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[3], int(sys.argv[1])))
s.listen(64)
s.settimeout(15)
for _ in range(int(sys.argv[2])):
    s.accept()[0].close()
"""
CONNECT = """import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()
"""


def _dial(host: str, port: int) -> str:
    return f"timeout 3 python3 -c {shlex.quote(CONNECT)} {shlex.quote(host)} {port} && echo OK"


def _serve(main: Node, port: int, accepts: int, bind: str) -> threading.Event:
    """Start the listener on the main; the event is set once it has ended."""
    done = threading.Event()

    def serve() -> None:
        try:
            script = f"timeout 20 python3 -c {shlex.quote(LISTENER)} {port} {accepts} "
            main.run(script + shlex.quote(bind), timeout=30)
        except NodeError:
            pass
        done.set()

    threading.Thread(target=serve, daemon=True).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not done.is_set():
        try:
            probe = f"ss -Hltn 'sport = :{port}' | grep -q . && echo UP"
            if main.run(probe, timeout=5).stdout.strip() == "UP":
                break
        except NodeError:
            pass
        time.sleep(0.05)
    return done


def tcp_check(
    cfg: JobConfig, cluster: Cluster, addr: str, workers: list[str], bind: str = "0.0.0.0"
) -> list[Check]:
    """A real connection from every worker to the main's master port, through a listener
    that exists only for this check and ends when every worker has connected (or in 15 s).
    It listens on the address the main itself resolves MASTER_ADDR to: a worker that
    reaches some other address would not reach the job's store either."""
    port = cfg.master_port
    main = cluster.nodes[cfg.main]
    done = _serve(main, port, len(workers), bind)
    res = cluster.map(
        lambda node: node.run(_dial(addr, port), timeout=10).stdout.strip() == "OK", workers
    )
    reached, errors = set(res.where(bool)), res.errors
    rows = [
        replace(  # a worker that cannot reach the main: its network's failure
            verdict(
                n,
                "tcp",
                n in reached,
                f"{'connected to' if n in reached else 'cannot connect to'} {addr}:{port}"
                + (f" ({errors[n]})" if n in errors else ""),
                "open the port in the firewall / check routes",
                Status.FAIL,
            ),
            node_fault=n not in reached,
        )
        for n in workers
    ]
    for _ in range(len(workers) - len(reached)):  # release the listener's waits
        try:
            main.run(_dial(bind if bind != "0.0.0.0" else "127.0.0.1", port) + "; true", timeout=10)
        except NodeError:
            break
    done.wait(25)
    return rows


# -- all-reduce: the smoke job -------------------------------------------------------


def smoke_job(job: str) -> str:
    return SMOKE_PREFIX + job


def smoke_config(cfg: JobConfig, timeout: float, token: str, sustain: float = 0.0) -> JobConfig:
    """The job, with its command replaced by the bundled smoke test: same nodes, env,
    setup, ordering and launch path, under a job name of its own."""
    source = resources.files("mntui.sessions.jobs").joinpath("allreduce_smoke.py").read_text()
    escaped = source.replace("{", "{{").replace("}", "}}")
    command = (
        f"cat >\"$MNTUI_RUN_DIR/smoke.py\" <<'MNTUI_SMOKE_EOF'\n{escaped}MNTUI_SMOKE_EOF\n"
        "exec python3 -m torch.distributed.run --nnodes={nnodes} --node_rank={node_rank} "
        "--nproc_per_node={nproc_per_node} "
        '--master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" '
        f'"$MNTUI_RUN_DIR/smoke.py" {int(timeout)} {shlex.quote(token)}'
        + (f" {sustain:g}" if sustain > 0 else "")
    )
    return replace(
        cfg,
        job=smoke_job(cfg.job),
        nodes=tuple(replace(n, command=command) for n in cfg.nodes),
        launch=replace(cfg.launch, ready=ReadyMode.PORT, ready_timeout=timeout),
    )


@dataclass(frozen=True)
class RankResult:
    ok: bool
    detail: str
    latency_us: float | None = None  # one float's all-reduce
    algbw_gbps: float | None = None  # 4 MiB's


def _number(entry: dict[str, Any], key: str) -> float | None:
    v = entry.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def parse_smoke_line(line: str, token: str) -> RankResult | None:
    """A rank's result, or None for a line that is not one (no marker of this run)."""
    mark = f"{SMOKE_MARK} {token} "
    if not line.startswith(mark):
        return None
    try:
        e = json.loads(line[len(mark) :])
    except ValueError:
        e = None
    if not isinstance(e, dict):
        return RankResult(False, f"unreadable result: {line[:200]}")
    total, expected = _number(e, "sum"), _number(e, "expected")
    if e.get("ok") is not True or total is None or expected is None:
        return RankResult(False, f"rank {e.get('rank')}: {e.get('error') or 'wrong sum'}")
    latency, bw = _number(e, "latency_us"), _number(e, "algbw_gbps")
    return RankResult(
        True,
        f"rank {e.get('rank')}/{e.get('world')} {e.get('backend')}: sum {total} "
        f"(expected {expected}), latency {latency or 0:.0f} us, algbw {bw or 0:.3f} GB/s",
        latency,
        bw,
    )


@dataclass
class _Follow:
    """One node's log, read incrementally: the results so far and how the job ended."""

    offset: int = 0
    results: list[RankResult] = field(default_factory=list)
    exit_code: int | None = None
    complete: bool = False  # exited, and the whole log is read
    lines: LineSplitter = field(default_factory=LineSplitter)
    head: list[str] = field(default_factory=list)  # the log's first lines, no results

    def feed(self, chunk: LogChunk, token: str) -> None:
        self.offset, self.exit_code = chunk.offset, chunk.exit_code
        self.complete = chunk.exit_code is not None and chunk.offset >= chunk.size
        for line in self.lines.feed(chunk.data):
            r = parse_smoke_line(line, token)
            if r is not None:
                self.results.append(r)
            elif len(self.head) < LOG_HEAD:
                self.head.append(line)


def _collect(cluster: Cluster, plan: Plan, token: str, timeout: float) -> dict[str, _Follow]:
    """Until every rank of every node reported (a node's count is its own nproc), or each
    node's job ended and its log is read, or the deadline."""
    want = {np.node: np.nproc for np in plan.nodes}
    follow = {np.node: _Follow() for np in plan.nodes}
    run_dirs = {np.node: np.run_dir for np in plan.nodes}
    deadline = time.monotonic() + timeout + 15
    while time.monotonic() < deadline:
        chunks = cluster.map(
            lambda node: read_new(node, run_dirs[node.name], follow[node.name].offset), list(follow)
        )
        for n, chunk in chunks.succeeded.items():  # an unanswered read is retried next round
            follow[n].feed(chunk, token)
        if all(len(f.results) >= want[n] or f.complete for n, f in follow.items()):
            break
        time.sleep(0.5)
    return follow


def _rows(follow: dict[str, _Follow], plan: Plan, timeout: float) -> list[Check]:
    rows: list[Check] = []
    wants = {np.node: np.nproc for np in plan.nodes}
    for n, f in follow.items():
        got, want = f.results, wants[n]
        fix = "see the tcp / ifname / versions checks"
        rows += [
            replace(verdict(n, "allreduce", r.ok, r.detail, fix, Status.FAIL), node_fault=not r.ok)
            for r in got
        ]
        if len(got) < want:
            rows.append(_no_result(n, f, want - len(got), want, timeout))
    return rows


def _no_result(n: str, f: _Follow, missing: int, want: int, timeout: float) -> Check:
    """Ranks that gave no result, and the log's first error: a job that could not start
    (python's "No module named 'torch'") is the environment's mistake, not the node's."""
    code = f" (exit code {f.exit_code})" if f.exit_code is not None else ""
    found = first_error(f.head)
    said = f": {found.summary}" if found is not None else ""
    detail = f"{missing} of {want} rank(s) gave no result within {timeout:g}s{code}{said}"
    if found is not None and found.mistake:
        return Check(n, "allreduce", Status.FAIL, detail, "fix the job's `setup` / `workdir`")
    fix = "the job was killed; see the tcp / master_addr checks"
    return Check(n, "allreduce", Status.FAIL, detail, fix, node_fault=True)


def _not_started(main: str, exc: Exception) -> Check:
    """The reason's first line and its first detail (which node, which PID)."""
    lines = [line.strip() for line in str(exc).strip().splitlines()] or ["no reason given"]
    why = lines[0] + (f" ({lines[1]})" if len(lines) > 1 else "")
    return Check(
        main, "allreduce", Status.FAIL, f"smoke job did not start: {why}", "see the checks above"
    )


def allreduce(cfg: JobConfig, cluster: Cluster, timeout: float = 60.0) -> list[Check]:
    """Launch the smoke job through the normal path; collect every rank's line; kill what
    was started, and only that: a launch refused by its preflight started nothing."""
    ran = smoke_run(cfg, cluster, timeout)
    if isinstance(ran, Check):
        return [ran]
    return _rows(ran[0], ran[1], timeout)


def smoke_results(
    cfg: JobConfig, cluster: Cluster, timeout: float, sustain: float = 0.0
) -> tuple[dict[str, list[RankResult]], Check | None]:
    """Every node's rank results, and the first failed row (None: every rank gave one):
    for the doctor's pairs (pairs.py), which want the numbers, and whose fault it was."""
    ran = smoke_run(cfg, cluster, timeout, sustain)
    if isinstance(ran, Check):
        return {}, ran
    rows = [r for r in _rows(ran[0], ran[1], timeout) if r.status is Status.FAIL]
    return {n: f.results for n, f in ran[0].items()}, rows[0] if rows else None


def smoke_run(
    cfg: JobConfig, cluster: Cluster, timeout: float, sustain: float = 0.0
) -> tuple[dict[str, _Follow], Plan] | Check:
    """The smoke job's launch, its results, its kill (allreduce's, and the pairs')."""
    token = secrets.token_hex(8)
    smoke = smoke_config(cfg, timeout, token, sustain)
    attempted: list[str] = []  # nodes whose start was tried: launch's own abort stops them

    def started(e: Event) -> None:
        if e.phase is Phase.STARTING and e.node is not None:
            attempted.append(e.node)

    try:
        result = launch(smoke, cluster=cluster, on_event=started)
    except (LaunchError, NodeError) as exc:
        if attempted:  # launch's abort stopped these; make sure, and touch no other node
            kill_job(smoke, cluster, names=list(dict.fromkeys(attempted)))
        return _not_started(cfg.main, exc)
    try:
        follow = _collect(cluster, result.plan, token, timeout)
    finally:
        kill_job(smoke, cluster, names=[np.node for np in result.plan.nodes])
    return follow, result.plan
