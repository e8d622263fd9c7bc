"""`mntui doctor`: find, before launch, what would make the job hang at rendezvous.

The commonest multi-node failure is a job that never starts: MASTER_ADDR resolving
differently on one worker, a blocked or busy port, a wrong NCCL_SOCKET_IFNAME, torch
versions that differ, stale code on one node. Each shows up here as one row with a
verdict and a fix, in seconds, instead of as a 15-minute rendezvous timeout.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import tmux
from .config import JobConfig, NodeSpec
from .launch import master_addr
from .plan import home_path
from .procs import SHELL_LIB, job_node_pattern, parse_listeners, parse_procs
from .remote import Cluster, Node, NodeError

q = shlex.quote


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


PY_PROBE = r"""
import json, sys
d = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    import torch
    d["torch"] = torch.__version__
    d["cuda"] = torch.cuda.is_available()
    d["cuda_version"] = torch.version.cuda
    d["gpus"] = torch.cuda.device_count() if d["cuda"] else 0
    try:
        d["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if d["cuda"] else None
    except Exception:
        d["nccl"] = None
except Exception as exc:
    d["torch_error"] = f"{type(exc).__name__}: {exc}"
print("@PY " + json.dumps(d))
"""


def probe_script(cfg: JobConfig, spec: NodeSpec, addr: str, is_main: bool) -> str:
    ifnames = " ".join(
        q(v) for k, v in spec.env.items() if k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    )
    setup = "\n".join(spec.setup)
    cd = (
        f"cd -- {home_path(spec.workdir)} 2>/dev/null || {{ echo '@WORKDIR missing'; exit 0; }}"
        if spec.workdir
        else ":"
    )
    ports = " ".join(str(p) for p in cfg.all_ports) if is_main else ""
    return f"""{SHELL_LIB}
echo "@TMUX $(tmux -V 2>&1 || echo missing)"
mntui_procinfo $(mntui_scan {q(job_node_pattern(cfg.job, spec.name))})
{tmux.has_session(tmux.session_name(cfg.job, spec.name))} && echo "@SESSION"
echo "@RESOLVE $(getent ahostsv4 {q(addr)} 2>/dev/null | awk 'NR==1 {{print $1}}')"
echo "@ADDRS $(ip -o -4 addr show 2>/dev/null | awk '{{print $4}}' | cut -d/ -f1 | tr '\\n' ' ')"
for _i in /sys/class/net/*; do
  read -r _st <"$_i/operstate" 2>/dev/null; echo "@IF ${{_i##*/}} $_st"
done
echo "@WANT_IF {ifnames}"
{f"mntui_listeners {ports}" if ports else ""}
(
{setup}
{cd}
echo "@WORKDIR ok $(pwd)"
echo "@DISK $(df -Pk . | awk 'NR==2 {{print $4}}')"
if git rev-parse --git-dir >/dev/null 2>&1; then
  echo "@GIT $(git rev-parse HEAD) $(git status --porcelain 2>/dev/null | wc -l)"
fi
python3 -c {q(PY_PROBE)} 2>&1 | tail -n 5
) </dev/null 2>&1
"""


@dataclass
class Probe:
    fields: dict[str, list[str]]
    procs: int
    holders: list[str]

    def one(self, key: str) -> str | None:
        vals = self.fields.get(key)
        return vals[0] if vals else None


def parse_probe(out: str) -> Probe:
    fields: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("@"):
            key, _, val = line[1:].partition(" ")
            fields.setdefault(key, []).append(val.strip())
    lines = out.splitlines()
    return Probe(fields, len(parse_procs(lines)), [h.describe() for h in parse_listeners(lines)])


def _ifname_ok(want: str, have: dict[str, str]) -> tuple[bool, str]:
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


def run_checks(cfg: JobConfig, cluster: Cluster, *, tcp: bool = True) -> list[Check]:
    addr = master_addr(cfg)
    rows: list[Check] = []
    specs = {n.name: n for n in cfg.nodes}

    def probe(node: Node) -> Probe:
        return parse_probe(
            node.run(
                probe_script(cfg, specs[node.name], addr, node.name == cfg.main), timeout=120
            ).stdout
        )

    t_connect = time.time()
    connected = cluster.connect()
    connect_s = time.time() - t_connect

    def clock(node: Node) -> tuple[float, float]:
        """Round trip and clock skew from one tiny command (the probe itself takes seconds)."""
        t0 = time.time()
        out = node.run("date +%s.%N", timeout=10).stdout
        t1 = time.time()
        return t1 - t0, float(out.strip() or 0) - (t0 + t1) / 2

    ok_nodes = [n for n, o in connected.items() if o.ok]
    clocks = cluster.map(clock, ok_nodes)
    results = cluster.map(probe, ok_nodes)
    probes: dict[str, Probe] = {}
    for n, spec in specs.items():
        err = connected[n].error or (results[n].error if n in results else None)
        value = results[n].value if n in results else None
        if err:
            rows.append(Check(n, "ssh", Status.FAIL, err, f"check `ssh {spec.host}` by hand"))
        elif value is not None:
            probes[n] = value
            measured = clocks[n].value
            rtt = measured[0] if measured is not None else None
            rows.append(
                Check(
                    n,
                    "ssh",
                    Status.PASS,
                    "connected, host key verified"
                    + (f", round trip {rtt * 1000:.1f} ms" if rtt is not None else "")
                    + f" (all nodes connected in {connect_s:.2f}s)",
                )
            )

    pys: dict[str, dict[str, object]] = {}
    for n, p in probes.items():
        tmux_v = p.one("TMUX") or "missing"
        rows.append(
            Check(
                n,
                "tmux",
                Status.PASS if tmux_v.startswith("tmux") else Status.FAIL,
                tmux_v,
                "" if tmux_v.startswith("tmux") else "install tmux on the node",
            )
        )
        wd = p.one("WORKDIR") or "missing"
        if wd == "missing":
            rows.append(
                Check(
                    n,
                    "workdir",
                    Status.FAIL,
                    f"{specs[n].workdir} does not exist",
                    "create it or fix `workdir`",
                )
            )
            continue
        disk = int(p.one("DISK") or 0) / 2**20
        rows.append(
            Check(
                n,
                "workdir",
                Status.PASS if disk > 5 else Status.WARN,
                f"{wd.split(' ', 1)[-1]}, {disk:.1f} GiB free",
                "" if disk > 5 else "free disk space",
            )
        )
        raw = p.one("PY")
        try:
            py = json.loads(raw) if raw else {}
        except ValueError:
            py = {}
        pys[n] = py
        if not py:
            rows.append(
                Check(n, "python", Status.FAIL, "python3 not found after `setup`", "fix `setup`")
            )
        elif "torch_error" in py:
            rows.append(
                Check(
                    n,
                    "torch",
                    Status.FAIL,
                    f"python {py['python']}: {py['torch_error']}",
                    "install torch in the job's environment, or fix `setup`",
                )
            )
        else:
            gpus = int(str(py.get("gpus") or 0))
            enough = not py.get("cuda") or gpus >= cfg.nproc_per_node
            rows.append(
                Check(
                    n,
                    "torch",
                    Status.PASS if enough else Status.FAIL,
                    f"python {py['python']}, torch {py['torch']}, cuda {py.get('cuda_version')}"
                    f" ({gpus} GPUs), nccl {py.get('nccl')}",
                    "" if enough else f"nproc_per_node is {cfg.nproc_per_node}",
                )
            )
        if p.fields.get("GIT"):
            commit, dirty = (p.one("GIT") or " 0").split()
            rows.append(
                Check(
                    n,
                    "git",
                    Status.WARN if int(dirty) else Status.PASS,
                    f"{commit[:12]}" + (f", {dirty} uncommitted change(s)" if int(dirty) else ""),
                    "commit or stash" if int(dirty) else "",
                )
            )

    # Consistency across nodes.
    torch_versions = {n: str(py.get("torch")) for n, py in pys.items() if py.get("torch")}
    if len(set(torch_versions.values())) > 1:
        for n, v in torch_versions.items():
            rows.append(
                Check(
                    n,
                    "versions",
                    Status.FAIL,
                    f"torch {v}; nodes differ: "
                    + ", ".join(f"{k}={x}" for k, x in torch_versions.items()),
                    "use one environment",
                )
            )
    commits = {n: (p.one("GIT") or "").split()[0] for n, p in probes.items() if p.fields.get("GIT")}
    if len(set(commits.values())) > 1:
        for n, c in commits.items():
            rows.append(
                Check(n, "code", Status.FAIL, f"commit {c[:12]}; nodes differ", "sync the code")
            )

    resolved = {n: (p.one("RESOLVE") or "") for n, p in probes.items()}
    main_probe = probes.get(cfg.main)
    main_view = resolved.get(cfg.main, "")
    for n, ip in resolved.items():
        if not ip:
            rows.append(
                Check(
                    n,
                    "master_addr",
                    Status.FAIL,
                    f"{addr} does not resolve here",
                    "fix DNS / /etc/hosts, or set master_addr to an IP",
                )
            )
        elif n != cfg.main and main_view and ip != main_view:
            rows.append(
                Check(
                    n,
                    "master_addr",
                    Status.FAIL,
                    f"{addr} -> {ip} here, but {main_view} on the main",
                    "fix DNS / /etc/hosts on this node, or set master_addr to an IP",
                )
            )
        else:
            rows.append(Check(n, "master_addr", Status.PASS, f"{addr} -> {ip}"))
    if main_probe is not None and main_view:
        addrs = (main_probe.one("ADDRS") or "").split()
        if main_view not in addrs and not main_view.startswith("127."):
            rows.append(
                Check(
                    cfg.main,
                    "master_addr",
                    Status.FAIL,
                    f"{addr} -> {main_view}, not an address of the main ({' '.join(addrs)})",
                    "master_addr must name the main itself",
                )
            )

    for n, p in probes.items():
        have = {x.partition(" ")[0]: x.partition(" ")[2] for x in p.fields.get("IF", [])}
        for want in (p.one("WANT_IF") or "").split():
            ok, detail = _ifname_ok(want.strip("'"), have)
            rows.append(
                Check(
                    n,
                    "ifname",
                    Status.PASS if ok else Status.FAIL,
                    detail,
                    "" if ok else "fix NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME",
                )
            )
        if p.procs or p.fields.get("SESSION"):
            rows.append(
                Check(
                    n,
                    "leftovers",
                    Status.FAIL,
                    f"{p.procs} process(es) of an earlier run"
                    + (", tmux session exists" if p.fields.get("SESSION") else ""),
                    "mntui kill",
                )
            )
        else:
            rows.append(Check(n, "leftovers", Status.PASS, "none"))
        measured = clocks[n].value
        if measured is not None:
            skew = measured[1]
            rows.append(
                Check(
                    n,
                    "clock",
                    Status.WARN if abs(skew) > 2 else Status.PASS,
                    f"skew {skew:+.3f}s",
                    "enable NTP/chrony" if abs(skew) > 2 else "",
                )
            )

    if main_probe is not None:
        if main_probe.holders:
            rows.append(
                Check(
                    cfg.main, "ports", Status.FAIL, "; ".join(main_probe.holders), "mntui cleanup"
                )
            )
        else:
            rows.append(
                Check(cfg.main, "ports", Status.PASS, f"{', '.join(map(str, cfg.all_ports))} free")
            )
            if tcp and len(probes) > 1:
                rows += tcp_check(
                    cfg, cluster, addr, [n for n in probes if n != cfg.main], main_view or "0.0.0.0"
                )
    return rows


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


def tcp_check(
    cfg: JobConfig, cluster: Cluster, addr: str, workers: list[str], bind: str = "0.0.0.0"
) -> list[Check]:
    """A real connection from every worker to the main's master port, through a listener
    that exists only for this check and ends when every worker has connected (or in 15 s).
    It listens on the address the main itself resolves MASTER_ADDR to: a worker that
    reaches some other address would not reach the job's store either."""
    port = cfg.master_port
    main = cluster.nodes[cfg.main]
    done = threading.Event()

    def serve() -> None:
        try:
            main.run(
                f"timeout 20 python3 -c {q(LISTENER)} {port} {len(workers)} {q(bind)}", timeout=30
            )
        except NodeError:
            pass
        done.set()

    threading.Thread(target=serve, daemon=True).start()
    deadline = time.time() + 10
    while time.time() < deadline and not done.is_set():
        try:
            if (
                main.run(
                    f"ss -Hltn 'sport = :{port}' | grep -q . && echo UP", timeout=5
                ).stdout.strip()
                == "UP"
            ):
                break
        except NodeError:
            pass
        time.sleep(0.05)
    connect = f"timeout 3 python3 -c {q(CONNECT)} {{host}} {port} && echo OK"
    res = cluster.map(
        lambda node: node.run(connect.format(host=q(addr)), timeout=10).stdout.strip() == "OK",
        workers,
    )
    rows = []
    for n in workers:
        ok = bool(res[n].value)
        rows.append(
            Check(
                n,
                "tcp",
                Status.PASS if ok else Status.FAIL,
                f"{'connected to' if ok else 'cannot connect to'} {addr}:{port}"
                + (f" ({res[n].error})" if res[n].error else ""),
                "" if ok else "open the port in the firewall / check routes",
            )
        )
    for _ in range(sum(1 for n in workers if not res[n].value)):  # release the listener's waits
        try:
            main.run(
                connect.format(host=q(bind if bind != "0.0.0.0" else "127.0.0.1")) + "; true",
                timeout=10,
            )
        except NodeError:
            break
    done.wait(25)
    return rows


def exit_code(rows: list[Check]) -> int:
    if any(r.status is Status.FAIL for r in rows):
        return 2
    return 1 if any(r.status is Status.WARN for r in rows) else 0


SMOKE_MARK = "MNTUI_SMOKE "


def smoke_config(cfg: JobConfig, timeout: float) -> JobConfig:
    """The job, with its command replaced by the bundled smoke test: same nodes, env,
    setup, ordering and launch path, under a job name of its own."""
    from dataclasses import replace
    from importlib import resources

    source = resources.files("mntui.sessions.jobs").joinpath("allreduce_smoke.py").read_text()
    escaped = source.replace("{", "{{").replace("}", "}}")
    command = (
        f"cat >\"$MNTUI_RUN_DIR/smoke.py\" <<'MNTUI_SMOKE_EOF'\n{escaped}MNTUI_SMOKE_EOF\n"
        "exec python3 -m torch.distributed.run --nnodes={nnodes} --node_rank={node_rank} "
        "--nproc_per_node={nproc_per_node} "
        '--master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" '
        f'"$MNTUI_RUN_DIR/smoke.py" {int(timeout)}'
    )
    return replace(
        cfg,
        job=f"{cfg.job}-smoke"[:64],
        nodes=tuple(replace(n, command=command) for n in cfg.nodes),
        launch=replace(cfg.launch, ready=cfg.launch.ready.__class__("port"), ready_timeout=timeout),
    )


def _smoke_line(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line[len(SMOKE_MARK) :])
        return value if isinstance(value, dict) else {"error": f"unreadable result: {line[:200]}"}
    except ValueError:
        return {"error": f"unreadable result: {line[:200]}"}


def allreduce(cfg: JobConfig, cluster: Cluster, timeout: float = 60.0) -> list[Check]:
    """Launch the smoke job through the normal path; collect every rank's line; always kill."""
    from .kill import kill_job
    from .launch import LaunchError, launch
    from .logs import read_new

    smoke = smoke_config(cfg, timeout)
    rows: list[Check] = []
    want = cfg.nproc_per_node
    try:
        result = launch(smoke, cluster=cluster)
    except (LaunchError, NodeError) as exc:
        rows.append(
            Check(
                cfg.main,
                "allreduce",
                Status.FAIL,
                f"smoke job did not start: {exc}".splitlines()[0],
                "see the checks above",
            )
        )
        kill_job(smoke, cluster)
        return rows
    lines: dict[str, list[dict[str, Any]]] = {n.node: [] for n in result.plan.nodes}
    offsets = {n.node: 0 for n in result.plan.nodes}
    exited: dict[str, int | None] = {n.node: None for n in result.plan.nodes}
    deadline = time.time() + timeout + 15
    try:
        while time.time() < deadline:
            for np in result.plan.nodes:
                try:
                    chunk = read_new(cluster.nodes[np.node], np.run_dir, 0)
                except NodeError:
                    continue
                offsets[np.node] = chunk.offset
                exited[np.node] = chunk.exit_code
                lines[np.node] = [
                    _smoke_line(x)
                    for x in chunk.data.decode(errors="replace").splitlines()
                    if x.startswith(SMOKE_MARK)
                ]
            if all(len(v) >= want for v in lines.values()) or all(
                c is not None for c in exited.values()
            ):
                break
            time.sleep(0.5)
    finally:
        kill_job(smoke, cluster)
    for np in result.plan.nodes:
        got = lines[np.node]
        for entry in got:
            ok = bool(entry.get("ok"))
            detail = (
                f"rank {entry.get('rank')}/{entry.get('world')} {entry.get('backend')}: sum "
                f"{entry.get('sum')} (expected {entry.get('expected')}), latency "
                f"{float(entry.get('latency_us', 0)):.0f} us, "
                f"algbw {float(entry.get('algbw_gbps', 0)):.3f} GB/s"
                if ok
                else f"rank {entry.get('rank')}: {entry.get('error') or 'wrong sum'}"
            )
            rows.append(
                Check(
                    np.node,
                    "allreduce",
                    Status.PASS if ok else Status.FAIL,
                    detail,
                    "" if ok else "see the tcp / ifname / versions checks",
                )
            )
        if len(got) < want:
            rows.append(
                Check(
                    np.node,
                    "allreduce",
                    Status.FAIL,
                    f"{want - len(got)} of {want} rank(s) gave no result within {timeout:g}s"
                    + (f" (exit code {exited[np.node]})" if exited[np.node] is not None else ""),
                    "the job was killed; see the tcp / master_addr checks",
                )
            )
    return rows


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
