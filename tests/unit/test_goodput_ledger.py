"""The goodput of ordinary runs: training counted from the steps the watchdog saw, while
the job runs and after a user killed it, and GPUs counted only where nvidia-smi listed
some: a CPU job costs no GPU-hours, an attempt whose GPUs were not seen costs "?"."""

from __future__ import annotations

from typing import Any

import pytest
from test_history import T0, record, report, run_id, steps, teardown, write_run

from mntui.sessions.history import stepclock
from mntui.sessions.history.ledger import chain_ledger, format_ledgers, ledger_of, ledgers
from mntui.sessions.history.records import scan
from mntui.sessions.history.stepclock import StepClock, note_steps
from mntui.sessions.runs import RunRecord, RunStatus, load_run

POLL = 1.0  # the watchdog's interval in the recording
RATE = 3.3  # steps per second, as the run stepped


def recorded(first_at: float, until: float) -> list[tuple[float, int | None]]:
    """What the watchdog's polls saw of a job that starts stepping at `first_at`: the
    time of each poll and the highest step any node had printed by then."""
    out: list[tuple[float, int | None]] = []
    t = T0 + POLL
    while t <= until:
        out.append((t, int((t - first_at) * RATE) + 1 if t >= first_at else None))
        t += POLL
    return out


def watched(job: str, rid: str) -> RunRecord:
    write_run(job, rid, record(job, rid, status="running", at=T0))
    rec = load_run(job, rid)
    assert rec is not None
    return rec


def poll(rec: RunRecord, clock: StepClock, at: float, step: int | None) -> None:
    """One watchdog round, as Watchdog.note_steps does it: two CPU nodes (no nvidia-smi),
    the note written when the clock says the record is behind."""
    clock.feed(at, step)
    for n in rec.nodes:  # no nvidia-smi: 0 GPUs listed
        clock.see_gpus(n.node, n.nproc, 0)
    if clock.due:
        rec.update(lambda r: note_steps(r, clock))


def test_a_run_killed_after_129_steps_in_43s_trained_about_that_long_live_and_after() -> None:
    job, rid = "gkill", run_id(900)
    rec, clock = watched(job, rid), StepClock()
    first_at = T0 + 4.2  # rendezvous and data loading before the first step
    polls = recorded(first_at, T0 + 43)
    for at, step in polls[: len(polls) // 2]:
        poll(rec, clock, at, step)
    live = ledger_of(job, rid, now=polls[len(polls) // 2][0])
    assert live is not None and live.ended_at is None
    span = polls[len(polls) // 2 - 1][0] - first_at
    assert span - stepclock.REFRESH - POLL <= live.training <= span, live.summary()
    assert live.training > 0 and "0% goodput" not in live.summary()

    for at, step in polls[len(polls) // 2 :]:
        poll(rec, clock, at, step)
    assert clock.last_step is not None and clock.last_step >= 129
    # `mntui kill` marks the run; the watchdog stands down and writes its last note
    rec.update(lambda r: setattr(r, "status", RunStatus.KILLED))
    rec.update(lambda r: note_steps(r, clock))
    done = ledger_of(job, rid, now=T0 + 100)
    assert done is not None and done.status == "killed" and done.ended_at is not None
    assert done.training == pytest.approx(43 - 4.2, abs=POLL), done.summary()
    assert [h["what"] for h in load_run(job, rid).history].count("steps") == 1  # type: ignore[union-attr]


def test_a_cpu_only_run_is_priced_without_gpus() -> None:
    cpu: dict[str, Any] = {"gpus": 0, "gpu_nodes": 2}
    c, r1 = run_id(910), run_id(911)
    write_run("gcpu", c, record("gcpu", c, status="restarting", notes=[
        steps(T0 + 10, T0 + 50, **cpu), teardown("node1", T0 + 53)]),
        report("node1", T0 + 51, T0 + 52.5))  # fmt: skip
    write_run("gcpu", r1, record("gcpu", r1, chain=c, attempt=1, status="finished",
              at=T0 + 60, notes=[steps(T0 + 70, T0 + 100, **cpu)]))  # fmt: skip
    (ledger,) = ledgers(scan(), T0 + 1000)
    (loss,) = ledger.losses
    assert ledger.gpus == 0 and loss.gpus == 0 and loss.gpu_hours == 0.0
    assert ledger.gpu_hours_lost == 0.0 and loss.lost > 0
    line = ledger.summary()
    assert " on CPU;" in line and "(CPU: no GPU-hours)" in line, line
    assert "GPUs" not in line and "GPU-h (" not in line and "nproc" not in line, line
    text = format_ledgers([ledger])
    assert text.splitlines()[1].endswith("; CPU"), text
    assert ledger.plain()["gpus"] == 0 and ledger.plain()["losses"][0]["gpu_hours"] == 0.0


def test_gpus_are_what_nvidia_smi_listed_and_unknown_when_not_seen() -> None:
    gpu: dict[str, Any] = {"gpus": 16, "gpu_nodes": 2}
    for i, (notes, job) in enumerate(((gpu, "ggpu"), ({}, "gold"), ({"gpus": 8, "gpu_nodes": 1},
                                      "ghalf"))):  # fmt: skip
        rid = run_id(920 + i)
        write_run(job, rid, record(job, rid, status="torn-down", notes=[
            steps(T0 + 10, T0 + 50, **notes), teardown("node1", T0 + 53)]),
            report("node1", T0 + 51, T0 + 52.5))  # fmt: skip
    by_job = {c.job: c for c in ledgers(scan(), T0 + 1000)}
    g = by_job["ggpu"]
    assert g.gpus == 16 and g.gpu_hours_lost == pytest.approx(16 * g.lost / 3600)
    assert " on 16 GPUs;" in g.summary() and "GPU-h (GPUs from nvidia-smi)" in g.summary()
    for job in ("gold", "ghalf"):  # an older record; a node whose GPUs were never seen
        c = by_job[job]
        assert c.gpus is None and c.gpu_hours_lost is None, job
        assert "? GPU-h" in c.summary() and "attempt(s); wall" in c.summary(), c.summary()
    assert "? GPU-h" in format_ledgers(by_job.values()).splitlines()[-1]


def test_the_clock_counts_a_nodes_gpus_up_to_its_processes_and_notes_them_at_once() -> None:
    clock = StepClock()
    assert not clock.due
    clock.see_gpus("a", 4, 8)  # 4 processes on an 8-GPU node hold 4
    clock.see_gpus("b", None, 2)  # an older record: no nproc
    clock.see_gpus("c", 2, None)  # nvidia-smi failed: not seen
    assert clock.gpus == {"a": 4, "b": 2} and clock.due  # before any step: recovery costs
    rec = RunRecord("gj", run_id(930), "/x.yaml", "127.0.0.1", 1, [])
    note_steps(rec, clock)
    assert not clock.due and rec.history[-1]["gpus"] == 6 and rec.history[-1]["gpu_nodes"] == 2
    clock.see_gpus("a", 4, 0)  # a GPU fell off the bus: it was held all the same
    assert clock.gpus["a"] == 4 and not clock.due
    clock.feed(T0, 1)
    assert clock.due  # the first step: at once
    note_steps(rec, clock)
    clock.feed(T0 + stepclock.REFRESH - 1, 5)
    assert not clock.due
    clock.feed(T0 + stepclock.REFRESH, 6)
    assert clock.due
    note_steps(rec, clock)
    assert [h["what"] for h in rec.history] == ["steps"]
    assert rec.history[0]["last_step"] == 6 and rec.history[0]["first_step"] == 1


def test_a_chain_of_attempts_counts_each_attempts_stepping_span() -> None:
    runs = []
    for i in range(2):
        rid = run_id(940 + i)
        notes = [steps(T0 + 100 * i + 5, T0 + 100 * i + 45, gpus=0, gpu_nodes=2)]
        write_run("gspan", rid, record("gspan", rid, chain=run_id(940), attempt=i,
                  status="restarting" if i == 0 else "killed", at=T0 + 100 * i, notes=notes))  # fmt: skip
    runs = list(scan("gspan").runs)
    assert chain_ledger(runs, T0 + 1000).training == pytest.approx(80)


def test_a_kill_after_a_teardown_does_not_stretch_the_chains_wall() -> None:
    """The walk of issue 29: `mntui kill` 25 s after a teardown (the run keeps its
    `torn-down`, the kill is a note) made the chain's wall 35.5 s -> 1m00s."""
    job, rid = "gwall", run_id(901)
    notes = [steps(T0 + 4, T0 + 30), teardown("node1", T0 + 35)]
    write_run(job, rid, record(job, rid, status="torn-down", notes=notes))
    before = ledger_of(job, rid, now=T0 + 40)
    rec = load_run(job, rid)
    assert rec is not None and before is not None
    rec.update(lambda r: r.note("kill", by="user"))  # now: long after T0 + 60
    after = ledger_of(job, rid, now=T0 + 10_000)
    assert after is not None and after.ended_at == before.ended_at == T0 + 35
    assert after.wall == before.wall


def test_a_failure_with_no_restart_after_it_says_so_not_unknown() -> None:
    """`recovery ?` read as "unknown" for a chain that simply had no restart (issue 29's
    walk); a restart whose first step was not seen yet stays `?`."""
    job, rid = "gnone", run_id(902)
    notes = [steps(T0 + 4, T0 + 30), teardown("node1", T0 + 35)]
    write_run(job, rid, record(job, rid, status="torn-down", notes=notes))
    text = format_ledgers(ledgers(scan(), now=T0 + 40))
    assert "recovery ?" not in text and text.count("recovery none (no restart)") == 2, text


def test_a_looks_fresher_clock_counts_in_its_chains_line() -> None:
    """A cluster run's record keeps its coordinator's clock only every few seconds (the
    here-watchdog's cadence): a `status` shows the clock it just read, not the record's."""
    from mntui.sessions.history.ledger import chain_line

    job, rid = "fresh", run_id(77)
    write_run(job, rid, record(job, rid, status="running", at=T0, notes=[steps(T0, T0 + 10)]))
    fresh = {rid: {"first_step_at": T0, "last_step_at": T0 + 40.0, "first_step": 1,
                   "last_step": 100, "gpus": 0, "gpu_nodes": 2}}  # fmt: skip
    old, now = ledger_of(job, rid, T0 + 50), ledger_of(job, rid, T0 + 50, steps=fresh)
    assert old is not None and now is not None
    assert (old.training, now.training) == (10.0, 40.0)
    assert "training 40" in chain_line(job, rid, fresh) and "training 10" in chain_line(job, rid)
