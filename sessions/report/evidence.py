"""What each node can tell about a failed run, gathered in one round trip per node.

After a teardown the processes are gone but their traces are not: the tail of the
log, the exit code and when it was written (node clock), the kernel's OOM-killer
lines when `dmesg`/`journalctl -k` is readable, and the ranks' Flight Recorder dumps:
where launch.sh pointed them (`fr/where` in the run directory), else where the job's
env did (`TORCH_FR_DUMP_TEMP_FILE`), and the stacks a cluster's sentinel saved before a
hang's kill (`stacks.json`, read by nodestacks.py). Everything travels base64-encoded
behind nonce-marked lines: a log is data, never protocol.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from mntui.sessions.errors import log_exception
from mntui.sessions.node.sentinel.stackcap import FILE as STACKS_FILE
from mntui.sessions.node.sentinel.stackcap import MAX_OUT
from mntui.sessions.procs import run_dir_word
from mntui.sessions.results import GroupResult, Outcome
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Cluster, Node

LOG_BYTES = 512 * 1024  # the first error is rarely further back than this from the end
FR_BYTES = 32 * 1024 * 1024  # per node: a dump of 2,000 entries is about 1 MB a rank
FR_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"  # torch's default for TORCH_FR_DUMP_TEMP_FILE
STACKS_BYTES = MAX_OUT + (64 << 10)  # a saved capture: its output, escapes, the decision


def flight_recorder_prefix(env: dict[str, str]) -> str | None:
    """Where the job's NCCL Flight Recorder dumps go, if the user enabled it."""
    try:
        enabled = int(env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) > 0
    except ValueError:
        enabled = False
    return env.get("TORCH_FR_DUMP_TEMP_FILE", FR_DEFAULT_PREFIX) if enabled else None


@dataclass(frozen=True)
class NodeEvidence:
    node: str
    log: bytes
    exit_code: int | None
    exited_at: float | None  # node clock, when launch.sh wrote the exit code
    kernel: tuple[str, ...]  # OOM-killer lines from the kernel log, if readable
    flight_records: dict[str, bytes]  # file name -> content
    malformed: int = 0
    capture: bytes | None = None  # the stacks its sentinel saved before a hang's kill

    @property
    def lines(self) -> list[str]:
        return self.log.decode(errors="replace").splitlines()


def evidence_script(run_dir: str, fr_prefix: str | None, nonce: str) -> str:
    m = f"@{nonce}"
    d = run_dir_word(run_dir)
    # Only this run's dumps (newer than its launch.sh): a prefix in /tmp is shared.
    fr = f"""fr=$(sed -n 1p "$d/fr/where" 2>/dev/null)
[ -n "$fr" ] || fr={shlex.quote(fr_prefix or "")}
if [ -n "$fr" ]; then
  total=0
  find "$(dirname -- "$fr")" -maxdepth 1 -type f -name "$(basename -- "$fr")*" \\
    ! -name '*.tmp' -newer "$d/launch.sh" 2>/dev/null | while IFS= read -r f; do
    size=$(stat -c %s "$f"); total=$((total + size))
    [ "$total" -le {FR_BYTES} ] || break
    echo "{m}FR $(printf '%s' "${{f##*/}}" | base64 -w0) $(base64 -w0 <"$f")"
  done
fi"""
    return f"""d={d}
if [ -f "$d/exit_code" ]; then
  read -r rc <"$d/exit_code"; echo "{m}EXIT $rc $(stat -c %.3Y "$d/exit_code")"
fi
echo "{m}LOG $(tail -c {LOG_BYTES} "$d/output.log" 2>/dev/null | base64 -w0)"
if [ -f "$d/{STACKS_FILE}" ]; then
  echo "{m}CAPTURE $(head -c {STACKS_BYTES + 1} "$d/{STACKS_FILE}" | base64 -w0)"
fi
k=$( (dmesg 2>/dev/null || journalctl -k -q --no-pager 2>/dev/null) \\
  | grep -iE 'out of memory|oom-kill|killed process' | tail -n 5)
[ -n "$k" ] && echo "{m}KERNEL $(printf '%s' "$k" | base64 -w0)"
{fr}
"""


_EXIT = re.compile(r"EXIT (-?\d{1,4}) (\d{1,12}(?:\.\d{1,9})?)\Z")
_DATA = re.compile(r"(LOG|KERNEL|CAPTURE) ([A-Za-z0-9+/=]*)\Z")
_FR = re.compile(r"FR ([A-Za-z0-9+/=]+) ([A-Za-z0-9+/=]*)\Z")
# A dump's name becomes a local file's: no path, and not `.` or `..` (a directory).
_SAFE_NAME = re.compile(r"(?!\.{1,2}\Z)[A-Za-z0-9._-]{1,128}\Z")


def parse_evidence(node: str, out: str, nonce: str) -> NodeEvidence:
    m = f"@{nonce}"
    code: int | None = None
    at: float | None = None
    log, kernel, bad = b"", "", 0
    capture: bytes | None = None
    fr: dict[str, bytes] = {}
    for line in out.splitlines():
        if not line.startswith(m):
            continue
        body = line[len(m) :]
        if e := _EXIT.match(body):
            code, at = int(e[1]), float(e[2])
        elif d := _DATA.match(body):
            data = _b64(d[2])
            if d[1] == "LOG":
                log = data
            elif d[1] == "CAPTURE":
                capture = data
            else:
                kernel = data.decode(errors="replace")
        elif f := _FR.match(body):
            name = _b64(f[1]).decode(errors="replace")
            if _SAFE_NAME.match(name):
                fr[name] = _b64(f[2])
            else:
                bad += 1
        else:
            bad += 1
    kernel_lines = tuple(x for x in kernel.splitlines() if x.strip())[-5:]
    return NodeEvidence(node, log, code, at, kernel_lines, fr, bad, capture)


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return b""


def gather(
    cluster: Cluster,
    record: RunRecord,
    fr_prefixes: dict[str, str | None],
    skip: frozenset[str] = frozenset(),
) -> GroupResult[NodeEvidence]:
    """Every node but `skip` (one known to be out of reach) at once; a node that does
    not answer is an error in its Outcome."""
    nonce = secrets.token_hex(4)

    def one(node: Node) -> NodeEvidence:
        rec = record.node(node.name)
        script = evidence_script(rec.run_dir, fr_prefixes.get(node.name), nonce)
        return parse_evidence(node.name, node.run(script, timeout=30).stdout, nonce)

    got = cluster.map(one, [n.node for n in record.nodes if n.node not in skip])
    for node in sorted(skip):
        got[node] = Outcome(node, error="not read: the watch found it unreachable")
    return got


def save_flight_records(record: RunRecord, evidence: dict[str, NodeEvidence]) -> list[Path]:
    """Copy the dumps into the local run record, one folder per node. One that cannot be
    written (a name that is no plain file name, a full disk) is left out: it must not
    cost the report the others, nor the report itself."""
    saved = []
    for node, ev in evidence.items():
        for name, data in ev.flight_records.items():
            path = record.dir / "flight-recorder" / node / name
            if not _SAFE_NAME.match(name):
                continue
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, path)  # a reader (the report, a copy) never sees half
            except OSError as exc:
                log_exception(f"flight recorder dump {node}/{name}", exc)
                continue
            saved.append(path)
    return saved
