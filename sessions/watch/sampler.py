"""The straggler sampler: each rank's Python stack every `watch.sample_every`, in the
watchdog's process, on a thread of its own.

One round is one round trip per node, all nodes at once: py-spy dumps every rank of the
run there (the report wing's capture script, the one the teardown uses) and nvidia-smi
reads its GPUs' clocks and throttle reasons. Its own threads, not the cluster's pool:
a round that takes its full budget never delays the poll loop. The finding goes to the
run's directory (report.save_finding) for `status`, the app and the report, and to
`on_finding`; the sampler itself never acts on it: the watchdog does, through
`watch.on_slow`, up to a poll `interval` later while rounds go on. So the watchdog hands
the finding it acted on back to `stop(keep=)`, and no round saves after a stop: a round's
"stopped?" check and its save are one step under `_saving`, against the stop's. The
report and `status` then read the finding the decision was made on, whatever the rounds'
and the poll loop's order (a later round that names nobody once took the report's "Slow
node" section away).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import log_exception
from mntui.sessions.node.waits import sample_of
from mntui.sessions.poll import THROTTLE_QUERY, parse_clocks, throttled
from mntui.sessions.procs import run_pattern
from mntui.sessions.report import (
    Finding,
    NodeStacks,
    Suspect,
    Throttle,
    capture_script,
    parse_capture,
    save_finding,
)
from mntui.sessions.results import NodeError
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Cluster, Node

from .straggler import Sample, Tally, name_suspect

MAX_BUDGET = 5.0  # seconds for one round's dumps, however long the interval


def round_script(pattern: str, budget: float, nonce: str) -> str:
    """The teardown's capture, every rank read with `--nonblocking`: a sample must not
    stop the rank (no ptrace stop: no pause in its step, no `t` state that a poll could
    read as frozen); a torn read is a failed dump, no sample."""
    capture = capture_script(pattern, budget, nonce, nonblocking=True)
    gpu = f"echo '@{nonce}GPU'\n{THROTTLE_QUERY}\n"
    return capture + "\n" + gpu


def parse_round(node: str, out: str, nonce: str) -> tuple[NodeStacks, tuple[Throttle, ...], int]:
    """The node's stacks, its throttled GPUs, and its malformed GPU lines."""
    stacks_text, _, gpu_text = out.partition(f"@{nonce}GPU\n")
    stacks = parse_capture(node, stacks_text, nonce)
    gpus, bad = parse_clocks(gpu_text)
    held = tuple(
        Throttle(node, g.index, g.reasons, g.sm_clock, g.max_clock, g.power, g.temperature)
        for g in throttled(gpus)
    )
    return stacks, held, bad


def samples_of(stacks: NodeStacks) -> list[Sample]:
    """A rank py-spy could not read is no sample: a failed dump is no evidence of work;
    nor is a rank still joining the job (the node's rule, waits.sample_of, which the
    cluster's sentinels follow too)."""
    out = []
    for s in stacks.stacks:
        waiting = sample_of(s.frames)
        if waiting is not None:
            out.append(Sample(s.rank, s.node, waiting))
    return out


class Sampler:
    def __init__(
        self,
        cfg: JobConfig,
        record: RunRecord,
        cluster: Cluster,
        on_finding: Callable[[Finding, Suspect | None], None] = lambda f, new: None,
    ) -> None:
        """`on_finding(finding, new)`: after every round; `new` is a rank named for the
        first time in this run (a notification's worth)."""
        self.cfg, self.record, self.cluster, self.on_finding = cfg, record, cluster, on_finding
        self.every = cfg.watch.sample_every
        self.tally = Tally()
        self.first: float | None = None  # monotonic time of the first round with samples
        self.suspect: Suspect | None = None
        self.told: set[int] = set()
        self.malformed = 0
        self._stop = threading.Event()
        self._saving = threading.Lock()  # a round's stop check and save, against stop()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max(2, len(record.nodes)), "mntui-sample")

    def start(self) -> None:
        if self.every > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mntui-sampler", daemon=True)
            self._thread.start()

    def stop(self, wait: bool = True, keep: Finding | None = None) -> None:
        """`wait`: until a round under way has ended (before a teardown dumps the ranks);
        the app's thread does not wait: a round that ends later saves nothing. `keep`:
        the finding a decision was made on, left as the run's (a round saving now ends
        first; never a round's after it)."""
        with self._saving:
            self._stop.set()
            if keep is not None:
                self._save(keep)
        if self._thread is not None and wait:
            self._thread.join(MAX_BUDGET + 6)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        wait = self.every
        while not self._stop.wait(wait):
            t0 = time.monotonic()
            try:
                self.round()
            except Exception as exc:  # a sampler's bug must never end the watchdog
                log_exception("straggler sampler", exc)
            wait = max(0.0, self.every - (time.monotonic() - t0))

    def round(self) -> Finding:
        nonce = secrets.token_hex(4)
        budget = max(1.0, min(MAX_BUDGET, self.every))
        nodes = self.cluster.nodes  # a run's node the cluster lacks is not sampled
        targets = {n.node: run_pattern(n.tag) for n in self.record.nodes if n.node in nodes}

        def one(node: Node) -> tuple[NodeStacks, tuple[Throttle, ...], int]:
            out = node.run(round_script(targets[node.name], budget, nonce), timeout=budget + 4)
            return parse_round(node.name, out.stdout, nonce)

        futures = [self._pool.submit(one, nodes[n]) for n in targets]
        samples: list[Sample] = []
        throttles: list[Throttle] = []
        for fut in futures:
            try:
                stacks, held, bad = fut.result()
            except (NodeError, OSError):
                continue  # an unreachable node is the poll's to judge
            samples += samples_of(stacks)
            throttles += held
            self.malformed += bad + stacks.malformed
        return self.judge(samples, tuple(throttles))

    def judge(self, samples: list[Sample], throttles: tuple[Throttle, ...]) -> Finding:
        now = time.monotonic()
        if samples and self.first is None:
            self.first = now
        self.tally.add(samples)
        ranks = self.tally.ranks()
        found = name_suspect(ranks, now - (self.first or now), time.time())
        if found is None or self.suspect is None or self.suspect.rank != found.rank:
            self.suspect = found
        else:  # the same rank still: named when first named, on today's evidence
            self.suspect = replace(self.suspect, ranks=found.ranks)
        new = None  # told once per rank and run: a straggler that comes and goes is no spam
        if found is not None and found.rank not in self.told:
            self.told.add(found.rank)
            new = found
        finding = Finding(self.suspect, throttles, ranks, self.tally.rounds, self.malformed)
        with self._saving:
            if self._stop.is_set():
                # A round that ends after the watchdog stopped the sampler (to act on a
                # finding, or to tear the job down) is dropped: the finding it acted on
                # stays the run's, not a later round's that may name nobody.
                return finding
            self._save(finding)
        # Told outside the lock: the app's `on_finding` waits for its own thread, which
        # may be in stop() right now.
        self.on_finding(finding, new)
        return finding

    def _save(self, finding: Finding) -> None:
        try:
            save_finding(self.record.dir, finding)
        except OSError:
            pass  # the run's directory went away: the finding still reaches on_finding
