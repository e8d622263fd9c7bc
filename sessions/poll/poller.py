"""Snapshots of every node of a run: one round trip per node per poll, all in parallel.

Each node's poll sends the script of `pollscript` on the node's persistent shell and
reads the answer into a NodeSnapshot with `pollstate`. The Poller keeps what must
persist between polls (log offsets, CPU ticks, the PIDs whose command lines it already
knows), one PollState per node, and runs the rounds: a node that does not answer in
time holds back no one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING

from mntui.sessions.results import NodeError, Outcome
from mntui.sessions.runs import RunRecord

from .pollscript import PORTS_EVERY, SCAN_EVERY, poll_script
from .pollstate import PollState, parse_poll
from .snapshot import NodeSnapshot

if TYPE_CHECKING:  # the ssh wing's machinery is not needed to read a snapshot (`status`)
    from mntui.sessions.ssh import Cluster, Node

ROUND_WAIT = 5.0  # seconds a poll round waits for a node before it counts as unreachable


class Poller:
    """Polls one run's nodes; keeps per-node offsets and CPU counters between polls."""

    def __init__(
        self,
        record: RunRecord,
        cluster: Cluster,
        *,
        gpus: bool = True,
        from_offsets: Mapping[str, int] | None = None,
    ) -> None:
        self.record, self.cluster, self.gpus = record, cluster, gpus
        self._state = {
            n.node: PollState(offset=(from_offsets or {}).get(n.node, 0)) for n in record.nodes
        }
        self.polls = 0  # rounds polled: one poll stream per run is checked by counting
        self.round_wait = ROUND_WAIT
        self._inflight: dict[str, Future[NodeSnapshot]] = {}
        self._sent: dict[str, float] = {}

    def offsets(self) -> dict[str, int]:
        """Where each log's next read starts: between two polls, the end of what the
        snapshots so far carried."""
        return {n: max(0, st.offset) for n, st in self._state.items()}

    def tail_from_end(self) -> None:
        """Skip what the log already holds (a viewer that joins late starts at the end)."""
        self.start_near_end(0)

    def start_near_end(self, keep: int) -> None:
        """Start `keep` bytes before the end of each log: a late viewer sees some context."""
        for st in self._state.values():
            st.offset, st.keep = -1, keep

    def poll_node(self, node: Node) -> NodeSnapshot:
        rec = self.record.node(node.name)
        st = self._state[node.name]
        # "From the end": this poll reads the log's last `keep` bytes, and follows from its size.
        tail = st.keep if st.offset < 0 else None
        t0 = time.monotonic()
        try:
            script = poll_script(
                rec,
                max(0, st.offset),
                frozenset(st.cmdlines),
                st.first,
                self.gpus,
                st.pane_pid,
                ports=st.polls % PORTS_EVERY == 0,
                full_scan=st.polls % SCAN_EVERY == 0,
                keep=tail,
            )
            st.polls += 1
            res = node.run(script, timeout=20)
        except NodeError as exc:
            return NodeSnapshot(rec.node, rec.rank, time.time(), reachable=False, error=exc.message)
        if tail is not None:
            st.offset = 0
        snap = parse_poll(rec, res.stdout, st, time.monotonic() - t0, self.gpus)
        if tail is not None:
            st.offset = snap.log_size or 0
        return snap

    def poll(
        self, on_node: Callable[[NodeSnapshot], object] | None = None
    ) -> dict[str, NodeSnapshot]:
        """Poll every node at once; `on_node` gets each snapshot the moment it arrives.

        A node that has not answered within `round_wait` holds back no one: it is
        unreachable for this round, and its poll, still running, is not sent again;
        its answer (log bytes included) comes with the first round after it returns.
        A hung sshd once held every round, and so every status, for the 20 s timeout."""
        self.polls += 1
        pending: dict[Future[NodeSnapshot], str] = {}
        cut: dict[Future[NodeSnapshot], float] = {}
        start = time.monotonic()
        for n in self.record.nodes:
            fut = self._inflight.get(n.node)
            limit = start + self.round_wait
            if fut is None:
                fut = self._inflight[n.node] = self._submit(n.node)
            pending[fut], cut[fut] = n.node, limit
        out = self._gather(pending, cut, on_node)
        return {n.node: out[n.node] for n in self.record.nodes}

    def _gather(
        self,
        pending: Mapping[Future[NodeSnapshot], str],
        cut: Mapping[Future[NodeSnapshot], float],
        on_node: Callable[[NodeSnapshot], object] | None,
    ) -> dict[str, NodeSnapshot]:
        """Every answer that comes before its node's cut; the others are unreachable."""
        out: dict[str, NodeSnapshot] = {}
        waiting = set(pending)
        while waiting:
            now = time.monotonic()
            open_cuts = [cut[f] for f in waiting if cut[f] > now]
            left = min(open_cuts) - now if open_cuts else 0.0  # 0: only what is done by now
            done, waiting = wait(waiting, timeout=left, return_when=FIRST_COMPLETED)
            for fut in done:
                name = pending[fut]
                del self._inflight[name]
                out[name] = self._answer(name, fut)
                if on_node:
                    on_node(out[name])
            if not done and not open_cuts:
                break
        for fut in waiting:
            name = pending[fut]
            late = time.monotonic() - self._sent[name]
            out[name] = self._unreachable(name, f"no answer for {late:.1f}s (poll still running)")
            if on_node:
                on_node(out[name])
        return out

    def _submit(self, name: str) -> Future[NodeSnapshot]:
        """One node's poll on a daemon thread: a hung node never keeps a command from
        exiting (a pool's threads are joined at exit)."""
        fut: Future[NodeSnapshot] = Future()
        self._sent[name] = time.monotonic()

        def run() -> None:
            try:
                fut.set_result(self.poll_node(self.cluster.nodes[name]))
            except BaseException as exc:  # a bug on one node must not hide the others
                fut.set_exception(exc)

        threading.Thread(target=run, name=f"mntui-poll-{name}", daemon=True).start()
        return fut

    def _answer(self, name: str, fut: Future[NodeSnapshot]) -> NodeSnapshot:
        exc = fut.exception()
        if exc is None:
            return fut.result()
        error = Outcome[NodeSnapshot].failure(name, exc).error
        return self._unreachable(name, error or type(exc).__name__)

    def _unreachable(self, name: str, error: str) -> NodeSnapshot:
        rec = self.record.node(name)
        return NodeSnapshot(rec.node, rec.rank, time.time(), reachable=False, error=error)
