"""The node's GPUs, read by its sentinel: nvidia-smi's CSV, as the manager's poller reads it.

Why here: a run the cluster watches has no poller on its nodes (issue 30: the manager no
longer polls N nodes), so the sentinel reads them. It runs the very queries the poller
runs (gpuwire.py's GPU_ARGS/APP_ARGS, the poller's GPU_QUERY/APP_QUERY) and sends
their text as it is, so the manager keeps one parser (poll/gpu.py parse_reading); the
sentinel sends its ranks' PIDs with it, and the parser marks those apps as the job's.

A spawn of nvidia-smi costs 20-50 ms, so it runs every EVERY seconds, not every
sample, in a thread of its own: a hung nvidia-smi (a stuck driver) never stalls the
sampling. Each run is bounded in time and size and killed by its process group past
either. What nvidia-smi prints is data: cut, made valid text without controls, and
checked by type and size by whoever receives it (gpuwire.check).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.proc.daemon import Overran, clean_env, read_output
from mntui.sessions.node.rules.termsafe import clean
from mntui.sessions.node.wire.gpuwire import APP_ARGS, GPU_ARGS, LIMIT, MAX_PIDS

EVERY = 2.0  # seconds between two reads
BUDGET = 10.0  # seconds one nvidia-smi may take (one without persistence mode takes ~1 s)
RESEND = 10.0  # seconds: an unchanged reading is sent again this often (a new coordinator)
REAP = 1.0  # seconds to wait for a killed nvidia-smi to exit


@dataclass(frozen=True)
class Reading:
    """One read of the node's GPUs: nvidia-smi's two answers, or `csv` None when the
    node has no nvidia-smi. Our own lines (a timeout, a cut) are among the answer's
    lines: the parser shows them as errors, as it shows a GPU that fell off the bus."""

    csv: str | None
    apps: str
    at: float  # monotonic, when read


def _text(raw: bytes, why: str | None) -> str:
    """Valid text without controls, cut at LIMIT on a line's end, with our word last."""
    if len(raw) > LIMIT:
        raw = raw[:LIMIT].rpartition(b"\n")[0] + b"\n"
    text = clean(raw.decode("utf-8", "replace"))
    if why is not None:
        text += ("" if not text or text.endswith("\n") else "\n") + f"mntui: {why}\n"
    return text


def run(argv: list[str], budget: float = BUDGET) -> tuple[str, subprocess.Popen[bytes] | None]:
    """`argv`'s stdout and stderr as text, and the process if it could not be reaped (a
    hung driver's nvidia-smi sleeps uninterruptibly, SIGKILL or not: waiting for it
    would hang this thread; the caller starts no other until it is gone)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # the poller's `2>&1`: a driver's error line is news
        start_new_session=True,  # its group is exactly what it started
        env=clean_env(os.environ),  # no tag of ours: a kill never takes it for the job
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + budget
    out, cut = read_output(proc, deadline, LIMIT)
    why = (
        None
        if cut is None
        else {
            Overran.TIME: f"nvidia-smi did not answer within {budget:g} s: killed",
            Overran.SIZE: f"nvidia-smi printed more than {LIMIT} bytes: cut",
        }[cut]
    )
    proc.stdout.close()
    if why is not None and not _killed(proc):
        return _text(out, why), proc
    try:
        rc = proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # it closed its output and goes on
        why = f"nvidia-smi did not exit within {budget:g} s: killed"
        if not _killed(proc):
            return _text(out, why), proc
        rc = 0
    if why is None and rc != 0:
        why = f"nvidia-smi exited {rc}"
    return _text(out, why), None


def _killed(proc: subprocess.Popen[bytes]) -> bool:
    """SIGKILL to its group (not reaped yet: the group id is still its), then reaped
    within REAP seconds, or False."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(REAP)
    except subprocess.TimeoutExpired:
        return False
    return True


class Reader:
    """Reads the node's GPUs every `every` seconds in a thread; `latest` is the last read."""

    def __init__(
        self,
        every: float = EVERY,
        budget: float = BUDGET,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
    ) -> None:
        self.every, self.budget, self.say = every, budget, say
        self._latest: Reading | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stuck: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """After the daemon's fork: a thread does not survive one."""
        threading.Thread(target=self._loop, name="gpus", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def latest(self) -> Reading | None:
        with self._lock:
            return self._latest

    def _loop(self) -> None:
        smi = shutil.which("nvidia-smi")
        while not self._stop.is_set():
            reading = self.read(smi) if smi is not None else None
            if reading is None:
                self.say("sentinel: no nvidia-smi on this node: no GPUs are read")
                reading = Reading(None, "", time.monotonic())
            with self._lock:
                self._latest = reading
            if reading.csv is None:
                return
            self._stop.wait(self.every)

    def read(self, smi: str) -> Reading | None:
        """Both answers; None when nvidia-smi is gone (no GPUs, not an error)."""
        stuck = self._stuck
        if stuck is not None and stuck.poll() is None:
            why = "mntui: an nvidia-smi killed before has not exited: no new read\n"
            return Reading(why, "", time.monotonic())
        self._stuck = None
        try:
            gpus, self._stuck = run([smi, *GPU_ARGS], self.budget)
            apps = ""
            if self._stuck is None:
                apps, self._stuck = run([smi, *APP_ARGS], self.budget)
        except OSError:  # removed, or no longer executable
            return None
        return Reading(gpus, apps, time.monotonic())


class Outbox:
    """What of the GPUs goes with a channel's next snap: a reading when it, or the ranks'
    PIDs, changed since this channel last sent one, or RESEND seconds after."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.sent: tuple[Reading, tuple[int, ...]] | None = None
        self.sent_at = 0.0

    def fields(self, pids: tuple[int, ...], now: float) -> dict[str, Any]:
        """`{"gpu": ...}` for the snap, or `{}`; `now` monotonic."""
        r = self.reader.latest()
        if r is None:
            return {}
        own = tuple(sorted(pids))[:MAX_PIDS]
        same = self.sent is not None and _same(self.sent, (r, own))
        if same and now - self.sent_at < RESEND:
            return {}
        self.sent, self.sent_at = (r, own), now
        age = 0.0 if r.csv is None else round(now - r.at, 3)  # no nvidia-smi: news that stays
        wire = {"csv": r.csv, "apps": r.apps, "own": list(own), "age": age}
        return {"gpu": wire}


def _same(a: tuple[Reading, tuple[int, ...]], b: tuple[Reading, tuple[int, ...]]) -> bool:
    return (a[0].csv, a[0].apps, a[1]) == (b[0].csv, b[0].apps, b[1])
