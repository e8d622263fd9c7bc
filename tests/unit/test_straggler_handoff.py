"""The straggler the watchdog acted on is the one its report carries (issue 28).

Under `watch.on_slow: kill_all` the sampler's thread names a rank and the poll loop acts
on it up to an `interval` later; rounds go on meanwhile. These tests put the sampler's
rounds and the poll loop's decision in the orders that lost the report its "Slow node"
section (once in 849 suite runs), one by one, on a real watchdog whose nodes are this
host (the teardown's kill and the report's reads run for real; the job is not running).
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import free_port

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.report import load_finding
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
from mntui.sessions.ssh import Cluster
from mntui.sessions.watch import Watchdog, sampler
from mntui.sessions.watch.straggler import Sample

SLOW = "Slow node (sampled while the job ran):\n  straggler: rank 1 (b) waits"


@pytest.fixture
def dog(tmp_path: Path) -> Iterator[Watchdog]:
    job = f"handoff{free_port()}"
    cfg = parse_config(
        textwrap.dedent(f"""
            job: {job}
            nodes: [{{name: a, host: localhost}}, {{name: b, host: localhost}}]
            command: sleep 1
            master_port: {free_port()}
            kill: {{grace: 0}}
            watch: {{sample_every: 0.5, on_slow: kill_all, capture_budget: 0}}
        """)
    )
    nodes = [
        NodeRecord(n, "localhost", r, f"{job}-{n}", f"{job}-{n}-tag", str(tmp_path / n))
        for r, n in enumerate(["a", "b"])
    ]
    record = RunRecord(job, "20261124-105215-abcd", "cfg.yaml", "localhost", 1, nodes)
    record.status = RunStatus.RUNNING
    record.create()
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        watchdog = Watchdog(cfg, record, cluster)
        yield watchdog
        watchdog.sampler.stop()


def name_rank_1(dog: Watchdog) -> None:
    """Ten rounds: rank 0 waits in 7, rank 1 in none; the tenth names rank 1 (told once)."""
    for waits in [True] * 7 + [False] * 3:
        dog.sampler.judge([Sample(0, "a", waits), Sample(1, "b", False)], ())
    assert dog.named, "the sampler told the watchdog of rank 1"


def a_round_that_names_nobody(dog: Watchdog) -> None:
    """7 waits of 11 against 1 of 11 could be luck (p = 0.012): rank 1 is let go."""
    late = dog.sampler.judge([Sample(0, "a", False), Sample(1, "b", True)], ())
    assert late.suspect is None


def test_a_round_ending_before_the_poll_loop_acts_leaves_the_report_the_finding_acted_on(
    dog: Watchdog,
) -> None:
    """The sampler names rank 1; before the poll loop's next step tells it, one more
    round ends (rounds every 0.5 s, polls every 1 s) and names nobody. The watchdog
    still acts on rank 1, and its report must say why: the run's finding is the one the
    decision was made on, not the later round's."""
    name_rank_1(dog)
    a_round_that_names_nobody(dog)
    fatal = dog.tell_slow()
    assert fatal is not None and fatal.why.startswith("straggler: rank 1 (b)")
    done = dog.teardown(fatal)
    assert done.report is not None
    text = (dog.record.dir / "report.txt").read_text()
    assert SLOW in text, text
    kept = load_finding(dog.record.dir)
    assert kept is not None and kept.suspect is not None and kept.suspect.rank == 1


class Watched:
    """The sampler's lock, telling when a second thread waits for it."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock, self.contended = lock, threading.Event()

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.contended.set()
            self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_round_saving_while_the_watchdog_stops_the_sampler_leaves_the_finding_acted_on(
    dog: Watchdog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round has passed its "stopped?" check and is saving when the poll loop stops the
    sampler to act on rank 1: its save must end before the stop leaves the finding acted
    on, never after it. The round's save is held until the stop either went through (the
    race: the round then overwrites the finding) or waits for the round."""
    name_rank_1(dog)
    fatal = dog.tell_slow()
    assert fatal is not None
    watched = Watched(dog.sampler._saving)
    monkeypatch.setattr(dog.sampler, "_saving", watched)
    real_save = sampler.save_finding
    stopper = threading.Thread(target=dog.teardown, args=(fatal,), name="test-poll-loop")

    def held_save(run_dir: Path, finding: sampler.Finding) -> None:
        if finding.suspect is None:  # the late round's: let the poll loop stop the sampler now
            stopper.start()
            deadline = time.monotonic() + 10
            while not dog.sampler._stop.is_set():
                if watched.contended.is_set():
                    break  # the stop waits for this save: it can only come after it
                assert time.monotonic() < deadline, "the stop neither went through nor waited"
                time.sleep(0.005)
        real_save(run_dir, finding)

    monkeypatch.setattr(sampler, "save_finding", held_save)
    a_round_that_names_nobody(dog)
    stopper.join(60)
    assert not stopper.is_alive()
    text = (dog.record.dir / "report.txt").read_text()
    assert SLOW in text, text
    kept = load_finding(dog.record.dir)
    assert kept is not None and kept.suspect is not None and kept.suspect.rank == 1
