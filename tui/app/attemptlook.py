"""The app following a run the cluster watches looks, here, for the chain's next attempt.

Why: when the main is lost, a spare succeeds it on the cluster (node/succession.py)
and starts the next attempt as the main; its coordinator, and so its stream, is on the
new main. The old stream only ends once it has been silent for a while, and its tries
again go on with backoff, so the app would wait up to RETRY_MAX for a break before it
looked. So a worker reads the job's latest record every LOOK seconds (one small file
here, no ssh; clusterfeed.newer_attempt) while the stream runs, and while the stream is
down it asks the chain's other nodes, every MOVED_LOOK seconds, whether a successor
leads now (launch/mainmoved.py: their epoch.json, then its board, written into the
records by the mirror as `status` writes it); a newer attempt of the chain moves the
app to it at once, said in the event log.
"""

from __future__ import annotations

import threading
import time

from textual import work

from mntui.sessions.runs import RunRecord
from mntui.sessions.watch import clusterfeed

from .following import Following
from .messages import AttemptMoved

LOOK = 2.0  # seconds between two looks for the chain's next attempt recorded here
MOVED_LOOK = 5.0  # seconds between two asks of the nodes for a successor, the stream down


class AttemptLook(Following):
    """The look of MntuiApp's stream; one per generation, ended with the stream."""

    feed_look: threading.Event | None = None  # set: the look ends
    feed_link: bool | None = None  # the stream's link to the coordinator (streaming.py)

    def start_look(self, record: RunRecord, generation: int) -> None:
        self.stop_look()
        self.feed_look = threading.Event()
        self.look_for_attempt(record, generation, self.feed_look)

    def stop_look(self) -> None:
        if self.feed_look is not None:
            self.feed_look.set()

    @work(thread=True, group="feedlook", exit_on_error=False)
    def look_for_attempt(self, record: RunRecord, generation: int, stop: threading.Event) -> None:
        self.look(record, generation, stop)

    def look(self, record: RunRecord, generation: int, stop: threading.Event) -> None:
        """Until `stop` or another generation: the chain's next attempt on another board
        (a new main). An attempt the same coordinator started (a `status` here recorded
        it) is on this very stream: the look goes on from it, the stream is kept."""
        from mntui.sessions.launch import board_dir

        asked = 0.0
        while not stop.wait(LOOK) and generation == self.generation:
            newest = clusterfeed.newer_attempt(record)
            if newest is None and self.feed_link is not True and time.monotonic() >= asked:
                asked = time.monotonic() + MOVED_LOOK  # the stream down: a successor?
                newest = self.moved(record)
            if newest is None:
                continue
            if board_dir(newest) != board_dir(record):
                self.post_message(AttemptMoved(generation, newest))
                return
            record = newest

    def moved(self, record: RunRecord) -> RunRecord | None:
        """The chain's next attempt, when a successor took the main's place: its board
        read from the new main and written into the records (the mirror), as `status`
        does; None when none did."""
        from mntui.sessions.launch import mainmoved
        from mntui.sessions.watch import sync

        view = mainmoved.successor_board(record, self.cfg.ssh)
        if view is None:
            return None
        sync(record, view)
        return clusterfeed.newer_attempt(record)

    def on_attempt_moved(self, message: AttemptMoved) -> None:
        if message.generation == self.generation:
            self.follow_chain()  # says where the stream goes, and starts it there
