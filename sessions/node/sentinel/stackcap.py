"""The ranks' Python stacks, taken by the sentinel on its own node before a hang's kill.

Why here: the stacks of a hung job (which rank is stopped, which wait in a collective)
exist only while the processes do, and the coordinator tears a hang down while the
manager may be away. So each sentinel runs, for its own node and all at once, the
capture script the launch rendered (launch/stackscript.py, the one the manager's
teardown runs over SSH; here the attempt's tag and run dir are its arguments, so one
script serves every attempt of a chain), within the coordinator's budget, and saves its
output with the nonce that marks its lines, atomically, as `stacks.json` in the
attempt's run dir; `mntui report` reads it with the node's other evidence and parses
it with the manager's one parser (report/stacks.py). Nothing here reads the output
beyond counting lines: it is the node's data, kept bounded and printable. A capture
that fails or runs out of time is said in the file, never a reason not to kill.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.proc import daemon
from mntui.sessions.node.wire.watchcfg import write_json

FILE = "stacks.json"  # in the attempt's run dir
MAX_OUT = 4 << 20  # bytes of the script's output kept (a rank's stacks: ~10-100 KiB)
_HUNG = frozenset({"frozen", "stalled", "unreachable"})
# what the script prints is ASCII (markers, numbers, base64): anything else becomes "?"
_PRINTABLE = bytes(b if 32 <= b < 127 or b == 10 else 63 for b in range(256))


SCRIPT = "stacks.sh"  # the launch's capture script, in the chain's first run dir


def script_args(entry: str, run_dir: str) -> list[str]:
    """The capture script's arguments for an attempt: its processes' tag pattern (as
    the kill matches them, the full environment entry) and its run dir."""
    return [re.escape(entry), run_dir]


@dataclass(frozen=True)
class Ask:
    """The coordinator's "stacks first" in a kill: the decision it took, the budget."""

    node: str
    state: str
    why: str
    decided_at: float
    budget: float

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "state": self.state, "why": self.why, "at": self.decided_at}


def ask_of(v: object, nodes: tuple[str, ...], most: float) -> Ask | None:
    """A kill's `stacks` field, checked; None for none, or for one not of this run."""
    if not isinstance(v, dict):
        return None
    node, state, why = v.get("node"), v.get("state"), v.get("why")
    at, budget = _number(v.get("at")), _number(v.get("budget"))
    if not isinstance(node, str) or node not in nodes or not isinstance(state, str):
        return None
    if state not in _HUNG or not isinstance(why, str) or at is None or not budget:
        return None
    return Ask(node, state, why[:200], at, min(budget, most))


def _number(v: object) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12
    return float(v) if ok and isinstance(v, (int, float)) else None


def take(script: str, entry: str, out_dir: str, nonce: str, run: str, ask: Ask) -> dict[str, Any]:
    """Runs the capture script for the attempt whose processes carry `entry` and whose
    run dir is `out_dir`, within `ask.budget`; saves what it printed there; returns what
    the kill report says of it: ranks found, stacks taken, seconds, or the error."""
    t0, taken_at = time.monotonic(), time.time()
    out, error = b"", None
    try:
        argv = ["sh", script, *script_args(entry, out_dir)]
        out, error = run_bounded(argv, ask.budget, MAX_OUT)
    except OSError as exc:
        error = f"the capture did not run: {exc.strerror or exc}"
    seconds = round(time.monotonic() - t0, 3)
    text = out.translate(_PRINTABLE).decode("ascii")
    saved = {
        "v": 1,
        "run": run,
        "nonce": nonce,
        "decision": ask.to_json(),
        "taken_at": taken_at,
        "seconds": seconds,
        "error": error,
        "out": text,
    }
    summary: dict[str, Any] = {"seconds": seconds, **counts(text, nonce)}
    try:
        write_json(os.path.join(out_dir, FILE), saved)
    except OSError as exc:
        error = f"not saved: {exc.strerror or exc}"
    if error is not None:
        summary["error"] = error[:200]
    return summary


def counts(text: str, nonce: str) -> dict[str, int]:
    """Ranks the script found and stacks py-spy gave (rc 0): for the kill's report only;
    `mntui report` parses the saved output itself."""
    ranks = stacks = 0
    for line in text.split("\n"):
        if line.startswith(f"@{nonce}RANK "):
            ranks += 1
        elif line.startswith(f"@{nonce}STACK ") and line.split(" ", 3)[2:3] == ["0"]:
            stacks += 1
    return {"ranks": ranks, "stacks": stacks}


def status_line(kills: object) -> str | None:
    """`status`'s line, from the coordinator's decision.json (its `kill` results, as
    the sentinels reported them): how many ranks' stacks were taken before the kill."""
    if not isinstance(kills, dict):
        return None
    taken = [r.get("stacks") for r in kills.values() if isinstance(r, dict)]
    counts = [t.get("stacks") for t in taken if isinstance(t, dict)]
    if not counts:
        return None
    n = sum(c for c in counts if type(c) is int and 0 <= c < 1 << 20)
    return f"stacks of {n} rank(s) were taken on the nodes at the teardown (`mntui report`)"


def run_bounded(argv: list[str], budget: float, limit: int) -> tuple[bytes, str | None]:
    """`argv`'s stdout, at most `limit` bytes within `budget` seconds; past either, its
    whole process group (py-spy's included) is killed: it was started in a session of
    its own, so the group is exactly what it started."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=daemon.clean_env(os.environ),  # no tag of ours: a kill never takes it for the job
    )
    assert proc.stdout is not None
    out, error, reaped = b"", None, False
    deadline = time.monotonic() + budget
    try:
        out, cut = daemon.read_output(proc, deadline, limit)
        error = (
            None
            if cut is None
            else {
                daemon.Overran.TIME: f"the capture ran out of its {budget:g} s budget",
                daemon.Overran.SIZE: f"the capture printed more than {limit} bytes: cut",
            }[cut]
        )
        if error is None:
            rc = proc.wait(max(0.1, deadline - time.monotonic()))
            reaped = True  # it waited for its own children: nothing of it is left
            error = f"the capture exited {rc}" if rc != 0 else None
    except subprocess.TimeoutExpired:
        error = f"the capture ran out of its {budget:g} s budget"
    finally:
        if not reaped:  # not reaped yet: its pid, and so its group's id, is still ours
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # py-spy and timeout with it
            except (ProcessLookupError, PermissionError):
                pass
        proc.stdout.close()
        proc.wait()
    return out[:limit], error
