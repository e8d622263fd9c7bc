"""The app following a run's agent: one poll stream per run.

When a headless watchdog watches the run, the app subscribes to its agent
(sessions/agent/server.py) and only renders what that agent polled; it polls the nodes
itself only when no agent answers, and tries the agent again now and then. The
stream is read in a thread worker that posts typed messages, like every other IO.

The agent's poller and ours read each log from offsets of their own, so a pane never
appends one source's bytes to the other's: a switch starts the pane over from the new
source's last START_BACK bytes (the agent's backlog, or our own read near the end).
Appending them once showed a run's first lines twice, the agent's stream repeating
what our polls had already shown (issue 23).
"""

from __future__ import annotations

import time
from typing import IO

from textual import work

from mntui.sessions.agent import AgentClient, AgentUnavailable, decode_status, try_connect
from mntui.sessions.poll import Poller
from mntui.sessions.runs import RunRecord

from .messages import AgentBacklog, AgentFollowing, AgentGone, NodeSnap, PollDone
from .ops import Operations
from .widgets import NodeView

AGENT_RETRY = 2.0  # seconds between tries to reach the agent while polling directly
AGENT_SILENCE = 10.0  # an agent that sends nothing for this long (x interval) is gone
START_BACK = 16 * 1024  # bytes of each log a pane starts from on a new source


class Following(Operations):
    """The agent side of MntuiApp; the app keeps the state named here."""

    views: dict[str, NodeView]
    poller: Poller | None
    generation: int
    subscribed: bool
    agent_tried: float
    agent_snaps: int
    agent_client: AgentClient | None
    agent_fed: bool  # the panes show the agent's backlog: its stream, not our polls
    fresh: set[str]  # nodes whose next read of our own starts their pane over
    watcher: str
    lock: IO[str] | None

    def apply_log(self, node: str, data: bytes) -> None:
        raise NotImplementedError

    def restart_log(self, node: str, data: bytes) -> None:
        raise NotImplementedError

    def log_event(self, text: str) -> None:
        raise NotImplementedError

    def schedule_poll(self, delay: float) -> None:
        raise NotImplementedError

    def next_poll_delay(self) -> float:
        raise NotImplementedError

    def follow_chain(self) -> bool:
        raise NotImplementedError

    def try_agent(self) -> None:
        """Follow the agent's poll stream; until it answers (or if it does not), no poll
        of our own runs: the stream's first message or AgentGone decides. Called only
        between two polls of ours, so none of our snapshots arrives after its backlog."""
        assert self.record is not None
        self.subscribed = True
        self.agent_fed = False
        self.agent_tried = time.monotonic()
        self.follow_agent(self.record, self.generation, START_BACK)

    @work(thread=True, group="agent", exit_on_error=False)
    def follow_agent(self, record: RunRecord, generation: int, back: int) -> None:
        client, via = try_connect(record.dir)
        why = via.detail
        if client is not None:
            self.agent_client = client
            with client:
                try:
                    why = self._stream(client, record, generation, back, via.detail)
                except AgentUnavailable as exc:
                    why = str(exc)
        self.post_message(AgentGone(generation, why))

    def _stream(
        self, client: AgentClient, record: RunRecord, generation: int, back: int, via: str
    ) -> str:
        nodes = [n.node for n in record.nodes]
        client.send("subscribe", run=record.run_id, back=back)
        silence = AGENT_SILENCE * max(1.0, self.cfg.watch.interval)
        for msg in client.stream(first=4.0, timeout=silence):
            if generation != self.generation:
                return "another run is shown"
            kind = msg.get("kind")
            if kind is None:
                self.post_message(AgentFollowing(generation, via))
            elif kind == "backlog":
                self.post_message(AgentBacklog(_backlog(msg.get("logs")), generation))
            elif kind == "snapshot":
                st = decode_status(msg, nodes)
                self.agent_snaps += 1
                for snap in st.snaps.values():
                    self.post_message(NodeSnap(snap, generation))
                self.post_message(PollDone(st.snaps, progress=st.progress, summary=st.summary))
            elif kind == "end":
                return str(msg.get("why", "the agent ended the stream"))
        return "the stream ended"

    def stop_following(self) -> None:
        """End the stream's worker now (it waits in recv): closing the app, another run;
        and the cluster's stream (streaming.py), if one runs."""
        client, self.agent_client = self.agent_client, None
        if client is not None:
            client.shutdown()
        self.stop_stream()

    def stop_stream(self) -> None:
        raise NotImplementedError

    def on_agent_following(self, message: AgentFollowing) -> None:
        if message.generation == self.generation:
            self.watcher = "headless (agent)"
            self.log_event(f"following the run's agent: {message.via}")

    def on_agent_backlog(self, message: AgentBacklog) -> None:
        """Every pane starts over from the agent's backlog, the bytes right before its
        stream; a node it sent nothing for has an empty log (or one it could not read)."""
        if message.generation == self.generation:
            self.agent_fed = True
            self.fresh.clear()
            for node in self.views:
                self.restart_log(node, message.logs.get(node, b""))

    def on_agent_gone(self, message: AgentGone) -> None:
        """Poll directly: from where our polls stopped if the agent showed nothing, else
        from near each log's end, each pane starting over (no line twice, none skipped)."""
        if message.generation != self.generation or self.record is None:
            return
        if self.follow_chain():
            return
        following = self.watcher == "headless (agent)"
        self.subscribed = False
        if following:
            self.watcher = "none"
            self.log_event(f"agent: {message.why}; polling the nodes directly")
        fed, self.agent_fed = self.agent_fed, False
        if fed and self.cluster is not None:
            self.poller = Poller(self.record, self.cluster)
            self.poller.start_near_end(START_BACK)
            self.fresh = set(self.views)
        # Our polls go on at their pace: a try between two of them adds none.
        polled = not fed and self.poller is not None and self.poller.polls > 0
        self.schedule_poll(self.next_poll_delay() if polled else 0)

    def retry_agent(self) -> bool:
        """Polling directly for a run someone else watches: its agent may have started
        since (a watchdog just launched takes a moment to serve). True: subscribed."""
        if self.lock is not None or self.record is None or not self.record.status.is_live:
            return False
        if time.monotonic() - self.agent_tried >= AGENT_RETRY and not self.subscribed:
            self.try_agent()
            return True
        return False


def _backlog(logs: object) -> dict[str, bytes]:
    """The backlog message's logs: base64 per node; anything else is skipped."""
    import base64
    import binascii

    out: dict[str, bytes] = {}
    for node, data in (logs if isinstance(logs, dict) else {}).items():
        try:
            out[str(node)] = base64.b64decode(data, validate=True) if isinstance(data, str) else b""
        except (binascii.Error, ValueError):
            continue
    return out
