"""Typed messages from the app's workers to its UI thread: the only way IO results arrive."""

from __future__ import annotations

from collections.abc import Mapping

from textual.message import Message
from textual.notifications import SeverityLevel

from mntui.sessions.errors import ExitCode
from mntui.sessions.events import Event
from mntui.sessions.poll import NodeProgress, NodeSnapshot
from mntui.sessions.procs import PortHolder
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch.feedparse import News


class NodeSnap(Message):
    def __init__(self, snap: NodeSnapshot, generation: int | None = None) -> None:
        super().__init__()
        self.snap, self.generation = snap, generation


class PollDone(Message):
    """`generation` names the poller that produced it: a reply from a poller that was
    replaced (a new run was attached) is dropped. None: the run shown now, whatever
    polled it (a bench's or a test's snapshots).

    `progress` and `summary`: given by whoever read every line of the logs (a bench);
    None: a poll of the app's own, whose progress its tracker reads from the snapshots."""

    def __init__(
        self,
        snaps: dict[str, NodeSnapshot],
        generation: int | None = None,
        *,
        progress: Mapping[str, NodeProgress] | None = None,
        summary: str | None = None,
    ) -> None:
        super().__init__()
        self.snaps, self.generation = snaps, generation
        self.progress, self.summary = progress, summary


class EngineEvent(Message):
    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class LaunchDone(Message):
    def __init__(self, record: RunRecord | None, error: str | None) -> None:
        super().__init__()
        self.record, self.error = record, error


class KillDone(Message):
    def __init__(self, clean: bool, summary: str, then_launch: bool = False) -> None:
        super().__init__()
        self.clean, self.summary, self.then_launch = clean, summary, then_launch


class HoldersFound(Message):
    def __init__(self, holders: dict[str, tuple[PortHolder, ...]], errors: dict[str, str]) -> None:
        super().__init__()
        self.holders, self.errors = holders, errors


class DoctorDone(Message):
    def __init__(self, text: str, code: ExitCode) -> None:
        super().__init__()
        self.text, self.code = text, code


class OpDone(Message):
    """An operation that changes nothing about the run (cleanup) has finished."""


class Notice(Message):
    """Text for a notification; shown as written, never read as markup."""

    def __init__(self, text: str, severity: SeverityLevel = "information") -> None:
        super().__init__()
        self.text, self.severity = text, severity


class ReportReady(Message):
    """A failure report to show (saved, or taken now for a live run)."""

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title, self.text = title, text


class FeedNews(Message):
    """One line of the cluster's stream, parsed (sessions/watch/feedparse.py)."""

    def __init__(self, generation: int, news: News) -> None:
        super().__init__()
        self.generation, self.news = generation, news


class FeedBroken(Message):
    """The stream ended; `final`: no try again helps (no way to reach the main)."""

    def __init__(self, generation: int, why: str, final: bool = False) -> None:
        super().__init__()
        self.generation, self.why, self.final = generation, why, final


class ChainMoved(Message):
    """A successor leads the chain now (node/chain/succession.py): its attempts are in the
    records (the mirror's sync), and the app follows the one it runs."""

    def __init__(self, generation: int) -> None:
        super().__init__()
        self.generation = generation


class LookedBack(Message):
    """What the cluster did while no one looked, in `status`'s words (its lines since
    the last look, each ended attempt and the restart policy's word, the latest
    decision), for the event log of an app opened on a run."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines
