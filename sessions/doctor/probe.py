"""`mntui doctor`: find, before launch, what would make the job hang at rendezvous.

The commonest multi-node failure is a job that never starts: MASTER_ADDR resolving
differently on one worker, a blocked or busy port, a wrong NCCL_SOCKET_IFNAME, torch
versions that differ, stale code on one node. Each shows up here as one row with a
verdict and a fix, in seconds, instead of as a 15-minute rendezvous timeout.

One probe script per node answers everything in one round trip. Its output is node
data: the user's `setup` runs in the middle of it and may print anything, so only
lines carrying this run's random marker count, each in its exact shape (the last one
wins), and a marked line of the wrong shape is skipped and counted, never raised.
The job's environment is entered as the launch enters it (launch.nodeplan.job_environment:
the workdir, then `setup`); what `setup` printed on stderr comes back base64-encoded
and bounded, and is shown with its control bytes stripped.
"""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.launch import has_session, job_environment, master_addr, session_name
from mntui.sessions.launch.sentinelship import PY_VERSION, sentinel_python, sentinel_word
from mntui.sessions.procs import (
    SHELL_LIB,
    b64_bytes,
    job_node_pattern,
    parse_listeners,
    parse_procs,
)
from mntui.sessions.results import GroupResult
from mntui.sessions.ssh import Cluster, Node
from mntui.sessions.termsafe import one_line

from . import checks as verdicts
from .checks import Check, Git, Probe, Python, Status, exit_code, format_rows
from .smoke import allreduce, tcp_check

__all__ = ["Check", "Probe", "Status", "allreduce", "exit_code", "format_rows", "run_checks"]

PY_PROBE = r"""
import json, sys
d = {"python": sys.version.split()[0]}
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
print(json.dumps(d))
"""
SETUP_ERR_BYTES = 2000  # of setup's stderr, read on the node
SETUP_ERR_CHARS = 300  # of it, shown


def probe_script(cfg: JobConfig, spec: NodeSpec, addr: str, is_main: bool, token: str) -> str:
    """Every value reaches the shell as its own quoted word or as a printf argument, never
    inside double quotes; the marker is hex, so it is safe in a printf format."""
    m = f"@{token}"
    ports = " ".join(str(p) for p in cfg.all_ports) if is_main else ""
    return f"""{SHELL_LIB}
mntui_procinfo $(mntui_scan {shlex.quote(job_node_pattern(cfg.job, spec.name))})
if {has_session(session_name(cfg.job, spec.name))}; then printf '{m} SESSION\\n'; fi
{f"mntui_listeners {ports}" if ports else ":"}
printf '{m} SCANNED\\n'
_v=$(tmux -V 2>/dev/null | head -n 1)
printf '{m} TMUX %s\\n' "${{_v:-missing}}"
_v=$(getent ahostsv4 {shlex.quote(addr)} 2>/dev/null | awk 'NR==1 {{print $1}}')
printf '{m} RESOLVE %s\\n' "$_v"
_v=$(ip -o -4 addr show 2>/dev/null | awk '{{print $4}}' | cut -d/ -f1 | tr '\\n' ' ')
printf '{m} ADDRS %s\\n' "$_v"
for _i in /sys/class/net/*; do
  [ -e "$_i" ] || continue
  _st=; read -r _st 2>/dev/null <"$_i/operstate"
  printf '{m} IF %s %s\\n' "${{_i##*/}}" "$_st"
done
_v=$({PY_VERSION})
printf '{m} SENTPY %s\\n' "$_v"
{sentinel_python(job_environment(spec, "exit 97"))}
printf '{m} SENTRUN %s\\n' "$(mntui_py)"
bash -c {shlex.quote(_in_job_environment(spec, m))} </dev/null 2>&1
"""


def _in_job_environment(spec: NodeSpec, m: str) -> str:
    """What runs in the job's environment, entered under bash as launch.sh enters it (a
    `source` line would fail under dash), then the probes that depend on it. setup's
    stderr goes to a private temp file (never /dev/null's removal: the trap checks)."""
    missing = f"{{ printf '{m} WORKDIR missing\\n'; exit 0; }}"
    err = "__mntui_setup_err"  # a name no `setup` line is likely to take
    return f"""{err}=$(mktemp 2>/dev/null) || {err}=/dev/null
trap '[ "${err}" = /dev/null ] || rm -f -- "${err}"' EXIT
{job_environment(spec, missing, f'"${err}"')}
_rc=$?
_v=$(head -c {SETUP_ERR_BYTES} "${err}" 2>/dev/null | base64 -w0)
printf '{m} SETUP %s %s\\n' "$_rc" "$_v"
printf '{m} WORKDIR ok %s\\n' "$(pwd)"
_v=$(df -Pk . 2>/dev/null | awk 'NR==2 {{print $4}}')
printf '{m} DISK %s\\n' "$_v"
if git rev-parse --git-dir >/dev/null 2>&1; then
  _v=$(git status --porcelain 2>/dev/null | wc -l)
  printf '{m} GIT %s %s\\n' "$(git rev-parse HEAD 2>/dev/null)" "$_v"
fi
_v=$(python3 -c {shlex.quote(PY_PROBE)} 2>/dev/null | tail -n 1)
printf '{m} PY %s\\n' "$_v"
_v=$(command -v py-spy 2>/dev/null)
_s=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null)
printf '{m} PYSPY %s %s %s\\n' "$(id -u)" "${{_s:--}}" "$_v"
"""


# -- reading the probe: each field in its exact shape, or not at all ----------------

Fields = dict[str, Any]


def _ipv4(word: str) -> bool:
    try:
        ipaddress.IPv4Address(word)
    except ValueError:
        return False
    return True


def _python(val: str) -> Fields:
    """An unreadable report is still an answer from python3 (not "python3 not found")."""
    try:
        d = json.loads(val)
    except ValueError:
        d = None
    if not isinstance(d, dict) or not isinstance(d.get("python"), str):
        return {"python": None, "python_raw": True}

    def text(key: str) -> str | None:
        v = d.get(key)
        return v if isinstance(v, str) else None

    gpus = d.get("gpus")
    py = Python(
        version=d["python"],
        torch=text("torch"),
        torch_error=text("torch_error"),
        cuda=d.get("cuda") is True,
        cuda_version=text("cuda_version"),
        gpus=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else 0,
        nccl=text("nccl"),
    )
    return {"python": py, "python_raw": True}


_GIT = re.compile(r"([0-9a-f]{40}|[0-9a-f]{64}) +(\d+)")
_IF = re.compile(r"([^\s/]+) ([a-z]*)")


def _workdir(v: str) -> Fields | None:
    if v == "missing":
        return {"workdir_missing": True}
    return {"workdir": v[3:]} if v.startswith("ok ") and len(v) > 3 else None


_VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}")
_PYSPY = re.compile(r"(\d+) (-|[0-3]) ?(/\S.*)?")


_SETUP = re.compile(r"([0-9]{1,3}) ?([A-Za-z0-9+/=]*)")


def _setup(v: str) -> Fields | None:
    """setup's exit status and its stderr: each line with its escape sequences and
    control bytes stripped, the lines joined, capped; None where nothing was printed."""
    m = _SETUP.fullmatch(v)
    raw = b64_bytes(m[2]) if m is not None else None
    if m is None or raw is None:
        return None
    lines = (one_line(ln).strip() for ln in raw.decode(errors="replace").splitlines())
    said = " | ".join(ln for ln in lines if ln)
    if len(said) > SETUP_ERR_CHARS:
        said = said[: SETUP_ERR_CHARS - 1] + "…"
    return {"setup_status": int(m[1]), "setup_err": said or None}


def _pyspy(v: str) -> Fields | None:
    m = _PYSPY.fullmatch(v)
    if m is None:
        return None
    return {"root": m[1] == "0", "ptrace_scope": None if m[2] == "-" else int(m[2]), "pyspy": m[3]}


def _git(v: str) -> Fields | None:
    m = _GIT.fullmatch(v.strip())  # `wc -l` pads with spaces on some systems
    return {"git": Git(m[1], int(m[2]))} if m is not None else None


# key -> the fields its value gives, or None when the value is not in its exact shape.
_FIELDS: dict[str, Callable[[str], Fields | None]] = {
    "SESSION": lambda v: None if v else {"session": True},
    "SCANNED": lambda v: None if v else {},
    "TMUX": lambda v: {"tmux": v} if v else None,
    "RESOLVE": lambda v: {"resolved": v or None} if not v or _ipv4(v) else None,
    "ADDRS": lambda v: {"addrs": tuple(v.split())} if all(map(_ipv4, v.split())) else None,
    "WORKDIR": _workdir,
    "DISK": lambda v: {"disk_kib": int(v)} if v.isascii() and v.isdigit() else None,
    "GIT": _git,
    "PY": lambda v: _python(v) if v else {},
    "PYSPY": _pyspy,
    "SETUP": _setup,
    # the login shell's python3, bare; and what runs the cluster's sentinel: the bare
    # one, or the one `setup` provides (the launch's rule: sentinelship.sentinel_python)
    "SENTPY": lambda v: {"sentinel_python": v or None} if not v or _VERSION.fullmatch(v) else None,
    "SENTRUN": lambda v: (
        {"sentinel_runs_on": sentinel_word(v)} if not v or sentinel_word(v) else None
    ),
}


def parse_probe(out: str, token: str) -> Probe:
    lines = out.splitlines()
    mark = f"@{token} "
    scanned = f"@{token} SCANNED"
    # Process and port lines come before `setup` runs: what setup prints cannot add any.
    before_setup = lines[: lines.index(scanned)] if scanned in lines else lines
    fields: Fields = {}
    ifaces: dict[str, str] = {}
    malformed = 0
    for line in lines:
        if not line.startswith(mark):
            continue
        key, _, val = line[len(mark) :].partition(" ")
        if key == "IF" and (m := _IF.fullmatch(val)) is not None:
            ifaces[m[1]] = m[2]
            continue
        parse = _FIELDS.get(key)
        got = parse(val) if parse is not None else None
        if got is None:
            malformed += 1
        else:
            fields.update(got)
    return Probe(
        procs=len(parse_procs(before_setup)),
        holders=tuple(h.describe() for h in parse_listeners(before_setup)),
        ifaces=ifaces,
        malformed=malformed,
        **fields,
    )


# -- running the checks -------------------------------------------------------------


@dataclass(frozen=True)
class Clock:
    rtt: float  # seconds
    skew: float  # node clock minus ours, seconds


def measure_clock(node: Node) -> Clock | None:
    """Round trip and clock skew from one tiny command (the probe itself takes seconds)."""
    t0 = time.time()
    out = node.run("date +%s.%N", timeout=10).stdout.strip()
    t1 = time.time()
    if not re.fullmatch(r"\d+(\.\d+)?", out):
        return None
    return Clock(t1 - t0, float(out) - (t0 + t1) / 2)


# An ssh failure that names a mistake of the config or of the user's credentials (a name
# that resolves nowhere: a mistyped node; a refused login; a host key): not the node's.
_SSH_MISTAKE = re.compile(
    r"resolve hostname|Name or service not known|nodename nor servname|name resolution"
    r"|No address associated|authentication failed|host key|known_hosts|ProxyJump"
    r"|ProxyCommand|ssh -G",
    re.IGNORECASE,
)


def ssh_fault(error: str) -> bool:
    """Whether a node's ssh failure is the node's own (down, refusing, timing out)."""
    return _SSH_MISTAKE.search(error) is None


def ssh_checks(
    cfg: JobConfig,
    connected: GroupResult[None],
    probed: GroupResult[Probe],
    clocks: GroupResult[Clock | None],
    connect_s: float,
) -> list[Check]:
    rows = []
    probes, measured, errors = probed.succeeded, clocks.succeeded, probed.errors
    for spec in cfg.nodes:
        n = spec.name
        # Which transport reached the node; an auth failure's text names the methods
        # the server offered (both transports put them there).
        over = "local" if spec.is_local else f"over {cfg.ssh.transport}"
        error = connected.errors.get(n) or errors.get(n)
        if error is not None:
            fix = f"check `ssh {spec.host}` by hand"
            rows.append(Check(n, "ssh", Status.FAIL, f"{over}: {error}", fix, ssh_fault(error)))
            continue
        clock, skipped = measured.get(n), probes[n].malformed
        rows.append(
            Check(
                n,
                "ssh",
                Status.PASS,
                ("local node, no ssh" if spec.is_local else f"connected {over}, host key verified")
                + (f", round trip {clock.rtt * 1000:.1f} ms" if clock is not None else "")
                + f" (all nodes connected in {connect_s:.2f}s)"
                + (f"; {skipped} malformed probe line(s) skipped" if skipped else ""),
            )
        )
    return rows


def run_checks(cfg: JobConfig, cluster: Cluster, *, tcp: bool = True) -> list[Check]:
    addr = master_addr(cfg)
    token = secrets.token_hex(8)  # marks this run's probe lines
    specs = {n.name: n for n in cfg.nodes}

    def probe(node: Node) -> Probe:
        script = probe_script(cfg, specs[node.name], addr, node.name == cfg.main, token)
        return parse_probe(node.run(script, timeout=120).stdout, token)

    t0 = time.monotonic()
    connected = cluster.connect()
    connect_s = time.monotonic() - t0
    clocks = cluster.map(measure_clock, connected.succeeded)
    probed = cluster.map(probe, connected.succeeded)
    probes, skews = probed.succeeded, clocks.succeeded
    rows = ssh_checks(cfg, connected, probed, clocks, connect_s)
    for n, p in probes.items():
        rows += verdicts.node_checks(n, p, specs[n], cfg)
    rows += verdicts.consistency_checks(probes)
    rows += verdicts.master_addr_checks(addr, cfg.main, probes)
    for n, p in probes.items():
        rows += verdicts.ifname_checks(n, p, specs[n])
        rows.append(verdicts.leftovers_check(n, p))
        clock = skews.get(n)
        if clock is not None:
            rows.append(verdicts.clock_check(n, clock.skew))
    main = probes.get(cfg.main)
    if main is not None:
        rows.append(verdicts.ports_check(cfg, main))
        workers = [n for n in probes if n != cfg.main]
        if tcp and workers and not main.holders:
            rows += tcp_check(cfg, cluster, addr, workers, main.resolved or "0.0.0.0")
    return rows
