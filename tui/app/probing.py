"""The nodes before the first run: reachability, CPU load, memory and GPUs in the panes.

With no run recorded there was nothing to poll, and the panes stayed empty until a
launch, though a node says all of that of itself whatever runs on it. A Poller over a
run that exists nowhere (no tmux process, tag or log of its name on any node) gets the
node's own half of the answer and finds none of a job's, so the panes show it until a
run is attached. One thread worker polls round after round and posts the NodeSnap
messages a run's poll posts; a snapshot from before the run is dropped once one is
attached (the generation moves on), and the loop ends there. No judge acts on these:
there is no run to watch.
"""

from __future__ import annotations

import time

from textual import work
from textual.message import Message
from textual.worker import get_current_worker

from mntui.sessions.config import JobConfig
from mntui.sessions.launch import session_name
from mntui.sessions.poll import Poller
from mntui.sessions.procs import run_tag
from mntui.sessions.runs import NodeRecord, RunRecord

from .drawing import Drawing
from .messages import NodeSnap

PROBE_RUN = "before-launch"  # not a run id (those start with a date): no node has its tag
PROBE_EVERY = 5.0  # seconds between two rounds, at least: load and memory change slowly


class ProbeDone(Message):
    """A round of the probe has ended: the table and the header are redrawn per round."""

    def __init__(self, generation: int) -> None:
        super().__init__()
        self.generation = generation


def probe_record(cfg: JobConfig) -> RunRecord:
    """A run of `cfg` that was never launched: polling it reads each node's own state."""
    nodes = [
        NodeRecord(
            n.name,
            n.host,
            n.rank,
            session_name(cfg.job, n.name),
            run_tag(cfg.job, PROBE_RUN, n.name),
            f".mntui/runs/{cfg.job}/{PROBE_RUN}/{n.name}",
        )
        for n in cfg.nodes
    ]
    return RunRecord(cfg.job, PROBE_RUN, "", cfg.main, cfg.master_port, nodes)


class Probing(Drawing):
    """The nodes before a run, for MntuiApp; it keeps the state named here."""

    polling_enabled: bool
    busy: str | None

    def probe_nodes(self) -> None:
        """Poll the nodes themselves until a run is attached (no run recorded yet)."""
        if self.cluster is not None and self.polling_enabled and self.record is None:
            self.probe(probe_record(self.cfg), self.generation)

    def probing(self, generation: int) -> bool:
        return self.record is None and self.generation == generation

    @work(thread=True, group="probe", exit_on_error=False)
    def probe(self, record: RunRecord, generation: int) -> None:
        assert self.cluster is not None
        poller = Poller(record, self.cluster)
        worker = get_current_worker()
        every = max(PROBE_EVERY, self.cfg.watch.interval)
        while not worker.is_cancelled and self.probing(generation):
            if self.busy is None:  # a launch's checks go first
                poller.poll(on_node=lambda s: self.post_message(NodeSnap(s, generation)))
                self.post_message(ProbeDone(generation))
            until = time.monotonic() + every
            while time.monotonic() < until and not worker.is_cancelled and self.probing(generation):
                time.sleep(0.2)  # a run attached (or the app closing) ends the wait

    def on_probe_done(self, message: ProbeDone) -> None:
        if message.generation != self.generation:
            return
        if self.table_mode:
            self.draw("table", self.refresh_table)
        self.draw("header", self.refresh_header)  # `UNREACHABLE on g381` before a run
