"""The live stream of a run the cluster watches, parsed: each line the main's follower
(node/coord/follower.py) writes becomes typed news the app shows as it shows a poll's.

Why strict and here: the stream is the nodes' data and the coordinator's files, read
through a shell on the main, so nothing in it is believed for more than its type and
bound. A line that is not ours (a login greeting) is noise; one that is ours but of
another shape is malformed; both are counted, neither stops the stream. Each node's
snapshot is made by the rule `status` uses on the same board (nodeseen.py: the
sentinel's entry checked by nodewire.check, a stale one no snapshot; the GPUs by
poll/gpu.py's parser), so the panes show what a poll would, and the judge's verdict is
the coordinator's, never one made here. The attempt's nodes are the board's (its status
names them by rank, a spare the coordinator swapped in too), so the panes follow the
attempt, not the record the stream was started from; a name the app was not told of
(its config's nodes and spares) is counted malformed, never a pane.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.rules.runid import RUN_ID
from mntui.sessions.node.wire import feedwire, gpuwire, nodewire
from mntui.sessions.node.wire.facts import Malformed as EntryMalformed
from mntui.sessions.poll import NodeProgress, NodeSnapshot, NodeState, Verdict, describe
from mntui.sessions.poll.gpu import GpuReading, parse_reading
from mntui.sessions.termsafe import one_line

from .boardranks import attempt_ranks
from .nodeseen import Said, node_seen

GPU_STALE = 30.0  # and a GPU reading (clustergpus')
WHY_MAX = 300
STRANGERS = 1024  # names of no node of ours remembered (each counted malformed once)


@dataclass(frozen=True)
class Row:
    """A node in the coordinator's status.json."""

    verdict: Verdict | None
    connected: bool
    step: int | None
    rate: float | None
    output_age: float | None
    exit_code: int | None
    procs: int | None  # the job's live processes in the coordinator's latest sample


@dataclass(frozen=True)
class BoardNews:
    run: str | None
    attempt: int | None
    snaps: Mapping[str, NodeSnapshot]  # every node of the run
    verdicts: Mapping[str, Verdict]  # the coordinator's, for the nodes it judged
    progress: Mapping[str, NodeProgress]
    summary: str  # `ranks 0-1 at step 34`, as `status` says it
    ranks: Mapping[str, int]  # the attempt's nodes by rank, as the coordinator has them
    first: str | None = None  # the node the coordinator named first to fail (firstfail.py)


@dataclass(frozen=True)
class HelloNews:
    pid: int  # the follower's, on the main


@dataclass(frozen=True)
class LogNews:
    node: str
    data: bytes
    skipped: int  # bytes the node's sentinel or the coordinator passed over before these
    first: bool  # the backlog: the pane starts over from it


@dataclass(frozen=True)
class LogsNews:
    chunks: tuple[LogNews, ...]  # the nodes that printed since the last


@dataclass(frozen=True)
class LinkNews:
    up: bool  # the follower reached the coordinator (or lost it)
    why: str


@dataclass(frozen=True)
class EndNews:
    why: str  # the coordinator said goodbye: the chain is over


News = BoardNews | HelloNews | LogsNews | LinkNews | EndNews


class FeedParser:
    """One stream's parser: keeps each node's last entry and GPU reading between boards."""

    def __init__(self, ranks: Mapping[str, int], known: frozenset[str] = frozenset()) -> None:
        """`ranks`: the record's, until a board names the attempt's; `known`: the nodes
        that may be shown besides them (the config's nodes and spares)."""
        self.ranks = dict(ranks)
        self.recorded = dict(ranks)
        self.known = known | frozenset(ranks)
        self.strangers: set[str] = set()  # nodes a board named that the app was not told of
        self.entries: dict[str, dict[str, Any]] = {}
        self.gpus: dict[str, gpuwire.GpuText] = {}
        self.malformed = 0
        self.noise = 0
        self.last_noise = ""  # what the shell said after our last line (an error)
        self.lines = 0  # lines of ours

    def feed(self, raw: bytes) -> News | None:
        try:
            obj = feedwire.read_line(raw)
        except feedwire.Malformed:
            self.malformed += 1
            return None
        if obj is None:
            self.noise += 1
            self.last_noise = one_line(raw.decode("utf-8", "replace"), WHY_MAX).strip()
            return None
        self.lines += 1
        self.last_noise = ""  # a greeting before the follower started is no error of it
        try:
            return self._news(obj)
        except (feedwire.Malformed, EntryMalformed, KeyError, TypeError, ValueError):
            self.malformed += 1
            return None

    def _news(self, obj: dict[str, Any]) -> News | None:
        kind = obj["k"]
        if kind == "logs":  # a spare's may come before the board that names it
            chunks = feedwire.check_chunks(obj["nodes"])
            return LogsNews(tuple(LogNews(n, *c) for n, c in chunks.items() if n in self.known))
        if kind == "link" and type(obj["up"]) is bool:
            return LinkNews(obj["up"], _text(obj["why"]))
        if kind == "end":
            return EndNews(_text(obj["why"]))
        if kind == "board":
            return self._board(obj)
        if kind == "hello":
            return HelloNews(feedwire.count(obj["pid"], 1 << 31))
        raise feedwire.Malformed(f"kind {kind[:40]!r}")

    def _board(self, obj: dict[str, Any]) -> BoardNews:
        now = obj["now"]
        if type(now) not in (int, float) or not 0 < now < 1e11:
            raise feedwire.Malformed("now is the main's clock")
        status = obj["status"]
        status = status if type(status) is dict else {}
        rows = _object(status.get("nodes", {}))
        self._layout(rows)
        # one node's bad entry is its own; a node not in the attempt is not shown
        for node, entry in _object(obj["nodes"]).items():
            try:
                if node in self.ranks:
                    self.entries[node] = nodewire.check(entry, "at")
            except EntryMalformed:
                self.malformed += 1
        for node, g in _object(obj["gpus"]).items():
            try:
                if node in self.ranks:
                    self.gpus[node] = gpuwire.GpuText(*gpuwire.check(g, "read_at"))
            except gpuwire.Malformed:
                self.malformed += 1
        snaps, verdicts, progress = {}, {}, {}
        for node, rank in self.ranks.items():
            row = self._row(rows.get(node))
            snaps[node] = self._snap(node, rank, row, float(now))
            if row is not None and row.verdict is not None:
                verdicts[node] = row.verdict
            if row is not None:
                progress[node] = NodeProgress(node, row.step, row.rate, float(now))
        run, attempt = status.get("run"), status.get("attempt")
        if run is not None and not (type(run) is str and RUN_ID.match(run)):
            self.malformed, run = self.malformed + 1, None  # node data: shown only as an id
        first = firstfail.read(status.get("first"), self.ranks)
        return BoardNews(
            run,
            attempt if type(attempt) is int else None,
            snaps, verdicts, progress, describe(progress, self.ranks), dict(self.ranks),
            first.node if first is not None else None,
        )  # fmt: skip

    def _layout(self, rows: dict[str, Any]) -> None:
        """The attempt's nodes, by the ranks the rows say (boardranks.py); no rows (no
        status yet): the last ones stand."""
        if not rows:
            return
        ranks = attempt_ranks(rows, self.recorded)
        self.ranks = {n: r for n, r in ranks.items() if n in self.known}
        self._strangers(rows)

    def _strangers(self, rows: dict[str, Any]) -> None:
        strangers = {n for n in rows if n not in self.known} - self.strangers
        self.malformed += len(strangers)  # once a name: it is in every board after
        if len(self.strangers) < STRANGERS:  # names remembered to count each once, bounded
            self.strangers |= set(list(strangers)[: STRANGERS - len(self.strangers)])

    def _row(self, d: object) -> Row | None:
        """A node's status row, every field typed, or None (counted when it is there)."""
        if d is None:
            return None
        try:
            if type(d) is not dict:
                raise ValueError("a row is an object")
            state, why = d.get("state"), d.get("why")
            verdict = None if state is None else Verdict(NodeState(state), _text(why or ""))
            step, rate = d.get("step"), d.get("rate")
            return Row(
                verdict,
                d.get("connected") is True,
                None if step is None else feedwire.count(step),
                _number(rate),
                _number(d.get("output_age")),
                d.get("exit_code") if type(d.get("exit_code")) is int else None,
                None if d.get("procs") is None else feedwire.count(d.get("procs"), 1 << 20),
            )
        except (ValueError, feedwire.Malformed):
            self.malformed += 1
            return None

    def _snap(self, node: str, rank: int, row: Row | None, now: float) -> NodeSnapshot:
        """As `status` makes it (nodeseen.py); an entry refused is counted once, dropped."""
        said = Said(False, None, None, None)
        if row is not None:
            said = Said(row.connected, row.output_age, row.exit_code, row.procs)
        seen, bad = node_seen(
            node, rank, self.entries.get(node), now, said, None, self._gpu(node, now)
        )
        if bad:
            self.malformed += 1
            del self.entries[node]
        return seen.snap

    def _gpu(self, node: str, now: float) -> GpuReading | None:
        t = self.gpus.get(node)
        if t is None or t.csv is None or now - t.read_at > GPU_STALE:
            return None
        return parse_reading(t.csv, t.apps, frozenset(t.own))


def _object(v: object) -> dict[str, Any]:
    if type(v) is not dict:
        raise feedwire.Malformed("an object")
    return v


def _number(v: object) -> float | None:
    if v is None:
        return None
    if type(v) not in (int, float) or not 0 <= v < 1e12:  # type: ignore[operator]
        raise feedwire.Malformed("a number")
    return float(v)  # type: ignore[arg-type]


def _text(v: object) -> str:
    if type(v) is not str:
        raise feedwire.Malformed("text")
    return one_line(v, WHY_MAX)
