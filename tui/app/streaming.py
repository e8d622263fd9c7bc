"""The app following a run the cluster watches: one stream over one ssh to the main node,
fed by the coordinator, and no poll of the nodes.

Why: a run the cluster watches has every node's state, step, snapshot and GPUs on the
coordinator's board already, and its sentinels ship their logs there while someone
follows (node/sentinel/logship.py, feedserve.py). Polling each node from here cost N connections
an interval (64 nodes: 64 ssh round trips a second); the stream costs one connection,
read in a thread worker that posts typed messages, like every other IO here. Its
snapshots are shown with the coordinator's verdicts (nothing is judged here: the
coordinator decides), its log chunks go through apply_log / restart_log as a poll's do.

A broken stream (this machine cut off, the main lost) is said in the event log and
started again with backoff; the nodes are never polled instead. While the stream is
down, or the main's follower has lost its coordinator, the chain's other nodes are
asked (at most every MOVED_LOOK seconds) whether a successor leads it now
(launch/mainmoved.py); its board is synced into the records as `status` syncs it, and
the app follows the attempt it runs (follow_chain). When the
coordinator said goodbye (the chain is over), the stream ends and one direct poll shows
the nodes as they were left (their panes' exit codes), as the app shows any ended run,
and none after it. The panes follow each attempt's nodes (panes.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from textual import work

from mntui.sessions.poll import NodeProgress, NodeSnapshot, NodeState, Verdict
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch import clusterfeed
from mntui.sessions.watch.feedparse import (
    BoardNews,
    EndNews,
    FeedParser,
    HelloNews,
    LinkNews,
    LogNews,
    LogsNews,
)
from mntui.sessions.watch.reading import by_cluster

from .messages import ChainMoved, FeedBroken, FeedNews, LookedBack
from .panes import Panes

RETRY_FIRST = 1.0  # seconds before the first try again, doubled each time
RETRY_MAX = 30.0
MOVED_LOOK = 5.0  # seconds between two asks of the chain's nodes for a successor
STALE_AFTER = 5.0  # seconds without a board (one a second) before the panes say STALE
UNJUDGED = Verdict(NodeState.STARTING, "the coordinator has not judged it yet")


class Streaming(Panes):
    """The cluster's stream for MntuiApp; its state has defaults here."""

    feed: clusterfeed.FeedStream | None = None
    # `feed` and `feed_parser` are the current generation's only: its worker sets them
    # and stop_stream takes `feed` under this lock (an app has one stream at a time)
    feed_lock = threading.Lock()
    feed_tries = 0  # streams broken in a row: the backoff
    feed_boards = 0  # boards shown (a test counts them)
    feed_pid: int | None = None  # the follower's pid on the main
    feed_parser: FeedParser | None = None  # the current stream's: its malformed count
    feed_link: bool | None = None  # the follower reaches the coordinator
    feed_asked = 0.0  # monotonic time of the last ask for a successor
    feed_seen: float | None = None  # monotonic time of the last board
    feed_ended: str | None = None  # the coordinator's goodbye
    feed_attempt: int | None = None  # the coordinator's attempt (its restarts)
    feed_first: str | None = None  # the node its coordinator named first to fail
    held: dict[str, LogNews]
    subscribed: bool  # the stream feeds the views: no poll of ours runs
    fresh: set[str]  # nodes whose next read of ours starts their pane over

    def apply_snapshot(self, snap: NodeSnapshot, verdict: Verdict | None = None) -> None:
        raise NotImplementedError

    def follow_chain(self) -> bool:
        raise NotImplementedError

    def restarted(self, run: str | None) -> None:
        raise NotImplementedError

    def streams(self, record: RunRecord) -> bool:
        """A live run the cluster watches: followed through its coordinator."""
        return by_cluster(record) and record.status.is_live

    def follow_cluster(self) -> None:
        """The stream replaces every poll: none of ours runs while it is on, and its
        first chunk of each log starts that pane over (no line twice)."""
        assert self.record is not None
        self.subscribed = True
        self.fresh.clear()
        self.feed_ended = self.feed_attempt = self.feed_first = None
        self.feed_tries = 0  # another main's stream: its backoff starts over
        self.held.clear()  # a new stream: each log's first chunk comes again
        self.stream_cluster(self.record, self.generation)

    @work(thread=True, group="feed", exit_on_error=False)
    def stream_cluster(self, record: RunRecord, generation: int) -> None:
        try:
            self._follow_main(record, generation)
        except Exception as exc:  # a bug here must not end the following for good
            self.post_message(FeedBroken(generation, f"{type(exc).__name__}: {exc}"))

    def _follow_main(self, record: RunRecord, generation: int) -> None:
        ssh = clusterfeed.argv(self.cfg, record.main.host)
        if ssh is None:
            why = "the main needs a password: no stream (`mntui status` reads the run)"
            self.post_message(FeedBroken(generation, why, final=True))
            return
        known = frozenset(n.name for n in (*self.cfg.nodes, *self.cfg.spares))
        parser = FeedParser({n.node: n.rank for n in record.nodes}, known)
        host, why = record.main.host, "the stream ended"
        for shipped in (False, True):
            try:
                stream = clusterfeed.FeedStream(ssh, host, clusterfeed.script(record, _sha()))
            except OSError as exc:
                why = f"ssh: {exc}"
                break
            if not self._adopt(stream, parser, generation):
                why = "another run is shown"
                break
            absent = self._read(stream, parser, generation)
            code = stream.close()
            why = stream.silent or parser.last_noise or f"the ssh to the main ended ({code})"
            if not absent or shipped or generation != self.generation:
                break
            failed = clusterfeed.ship(self.cfg, ssh, host, record)
            if failed is not None:
                why = failed
                break
        if parser.malformed:
            why += f"; {parser.malformed} malformed line(s) ignored"
        self.post_message(FeedBroken(generation, why))

    def _read(self, stream: clusterfeed.FeedStream, parser: FeedParser, generation: int) -> bool:
        """Posts the stream's news until it ends; True: the main lacks the bundle."""
        for raw in stream.lines():
            if generation != self.generation:
                return False
            if raw == clusterfeed.ABSENT:
                return True
            news = parser.feed(raw)
            if news is not None:
                self.post_message(FeedNews(generation, news))
        return False

    def _adopt(self, stream: clusterfeed.FeedStream, parser: FeedParser, generation: int) -> bool:
        """The worker's stream becomes the app's only while its generation is current:
        an older worker whose ssh came up late would replace the new stream's handle,
        and stop_stream would close the wrong stream. The app moves its generation on
        before it stops the stream, so under the lock a worker sees either the old one
        (its stream is then stopped) or the new one (it closes its own here)."""
        with self.feed_lock:
            if generation == self.generation:
                self.feed, self.feed_parser = stream, parser
                return True
        stream.close()
        return False

    def stop_stream(self) -> None:
        with self.feed_lock:
            feed, self.feed = self.feed, None
        if feed is not None:
            feed.close()

    def on_feed_news(self, message: FeedNews) -> None:
        if message.generation != self.generation:
            return
        news = message.news
        if isinstance(news, BoardNews):
            self.show_board(news)
        elif isinstance(news, LogsNews):
            self.show_logs(news.chunks)  # a node's with no pane yet held until it has one
        elif isinstance(news, HelloNews):
            self.feed_pid = news.pid
            self.log_event("following the run through its coordinator (one ssh to the main)")
        elif isinstance(news, LinkNews) and news.up != self.feed_link:
            self.feed_link = news.up
            self.log_event(f"coordinator {'joined' if news.up else 'lost'}: {news.why}")
            if not news.up:
                self.look_for_successor()
        elif isinstance(news, EndNews):
            self.feed_ended = news.why
            self.log_event(f"the coordinator ended: {news.why}")

    def show_board(self, news: BoardNews) -> None:
        """Each node's snapshot with the coordinator's verdict (none judged here), then
        the steps, the table and the header, as after a poll."""
        self.feed_tries = 0
        self.feed_boards += 1
        self.feed_seen = time.monotonic()
        stale = (
            news.attempt is not None
            and self.feed_attempt is not None
            and (news.attempt < self.feed_attempt)
        )  # a coordinator started again mid-chain, not yet back on its attempt
        if news.attempt is not None and not stale and news.attempt != self.feed_attempt:
            if self.feed_attempt is not None:
                self.log_event(f"the coordinator restarted the job: attempt {news.attempt + 1}")
            self.feed_attempt = news.attempt
        if not stale:  # an earlier attempt's layout must not move the panes back
            self.fit_panes(news.ranks, f"the attempt of run {news.run or '?'}")
            self.feed_first = news.first  # the header names it, as status and report do
            self.restarted(news.run)
        for node, snap in news.snaps.items():
            view = self.views.get(node)
            if view is None:
                continue
            verdict, old = news.verdicts.get(node) or view.verdict, view.verdict
            if verdict is not None and verdict.state.is_problem and verdict != old:
                self.log_event(f"{node}: {verdict.state.value} ({verdict.why})")
            self.apply_snapshot(snap, verdict or UNJUDGED)
        self.note_progress(news.progress, news.summary or None)
        self.after_board()

    def after_board(self) -> None:
        raise NotImplementedError

    def note_progress(
        self, progress: Mapping[str, NodeProgress] | None, summary: str | None
    ) -> None:
        raise NotImplementedError

    def on_feed_broken(self, message: FeedBroken) -> None:
        """Again with backoff, never a poll of each node; after the coordinator's goodbye,
        one last direct read of the nodes."""
        if message.generation != self.generation or self.record is None:
            return
        if self.follow_chain():  # a newer attempt of the chain recorded here (the mirror)
            return
        self.feed = None
        self.feed_link = None
        if self.feed_ended is not None:
            self.log_event("cluster stream over; one last read of the nodes")
            self.final_poll()
            return
        if message.final:
            self.log_event(f"cluster stream: {message.why}")
            return
        self.look_for_successor()
        self.feed_tries += 1
        delay = min(RETRY_MAX, RETRY_FIRST * 2 ** (self.feed_tries - 1))
        self.log_event(f"cluster stream broke: {message.why}; again in {delay:.0f} s")
        generation = self.generation
        self.set_timer(delay, lambda: self.restream(generation))

    @work(thread=True, group="lookback", exit_on_error=False)
    def look_back(self, record: RunRecord) -> None:
        """At the app's open on a run the cluster watches: what happened while no one
        looked, as `status` says it (issue 38: a restart, a teardown, a gave-up chain
        were on no screen), the records synced first as `status` syncs them."""
        from mntui.sessions.watch.fromcluster import away_lines, chain_lines, decision_lines
        from mntui.sessions.watch.mirror import read_main, sync

        if self.cluster is None:
            return
        view = read_main(record, self.cluster)
        if view is None:
            return
        latest = sync(record, view)
        lines = [*away_lines(record, view), *chain_lines(view)]
        lines += decision_lines(view, latest.run_id)
        if lines:
            self.post_message(LookedBack(lines))

    def on_looked_back(self, message: LookedBack) -> None:
        for line in message.lines:
            self.log_event(f"while away: {line.strip()}" if line.startswith("since") else line)
        self.follow_chain()  # a later attempt the sync recorded: shown

    def tick(self) -> None:
        self.mark_stale()
        super().tick()

    def feed_stale(self) -> float | None:
        """Seconds since the stream's last board, once past STALE_AFTER while the app
        follows the cluster (issue 38: a cut looked healthy, the panes at their last
        step); None when fresh, or nothing is followed."""
        if not self.subscribed or self.feed_seen is None or self.feed_ended is not None:
            return None
        age = time.monotonic() - self.feed_seen
        return age if age >= STALE_AFTER else None

    def mark_stale(self) -> None:
        """Each pane says how old what it shows is, every second while the stream is out."""
        age = self.feed_stale()
        for view in self.views.values():
            if view.stale is None and age is None:
                continue
            view.stale = age
            pane = self.panes.get(view.node)
            if pane is not None and pane.is_attached:
                pane.refresh_view()

    def look_for_successor(self) -> None:
        if self.record is None or self.record.chain is None:
            return
        if time.monotonic() - self.feed_asked < MOVED_LOOK:
            return
        self.feed_asked = time.monotonic()
        self.ask_successor(self.record, self.generation)

    @work(thread=True, group="moved", exclusive=True, exit_on_error=False)
    def ask_successor(self, record: RunRecord, generation: int) -> None:
        from mntui.sessions.launch import mainmoved
        from mntui.sessions.watch.mirror import sync

        view = mainmoved.successor_board(record, self.cfg.ssh)
        if view is not None:
            sync(record, view)
            self.post_message(ChainMoved(generation))

    def on_chain_moved(self, message: ChainMoved) -> None:
        if message.generation == self.generation:
            self.follow_chain()

    def restream(self, generation: int) -> None:
        if generation == self.generation and self.record is not None and self.feed is None:
            self.stream_cluster(self.record, generation)

    def final_poll(self) -> None:
        raise NotImplementedError


def _sha() -> str:
    return clusterfeed.bundle_sha()
