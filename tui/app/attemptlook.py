"""The app following a run the cluster watches looks, here, for the chain's next attempt.

Why: when the main is lost, this machine's stand-by (recover/standby.py) starts the next
attempt with a spare as the main, and records it here; its coordinator, and so its
stream, is on the new main. The old stream only ends once it has been silent for a
while, and its tries again go on with backoff, so the app waited up to RETRY_MAX for a
break before it looked. Now a worker reads the job's latest record every LOOK seconds
(one small file here, no ssh; clusterfeed.newer_attempt) while the stream runs, and a
newer attempt of the chain moves the app to it at once, said in the event log.
"""

from __future__ import annotations

import threading

from textual import work

from mntui.sessions.runs import RunRecord
from mntui.sessions.watch import clusterfeed

from .following import Following
from .messages import AttemptMoved

LOOK = 2.0  # seconds between two looks for the chain's next attempt recorded here


class AttemptLook(Following):
    """The look of MntuiApp's stream; one per generation, ended with the stream."""

    feed_look: threading.Event | None = None  # set: the look ends

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

        while not stop.wait(LOOK) and generation == self.generation:
            newest = clusterfeed.newer_attempt(record)
            if newest is None:
                continue
            if board_dir(newest) != board_dir(record):
                self.post_message(AttemptMoved(generation, newest))
                return
            record = newest

    def on_attempt_moved(self, message: AttemptMoved) -> None:
        if message.generation == self.generation:
            self.follow_chain()  # says where the stream goes, and starts it there
