"""The chaos campaign's fault of a job that hides from its tag (issue 39), profile `cluster`.

`renamed-job`: every rank names itself at start (setproctitle, as many training stacks
do: its environment, mntui's tag with it, is written over) and starts a helper with a
clean environment (`env -i`) in a session of its own, which names itself too
(tests/jobs/faulty_train.py --rename --helper). Nothing of them carries the tag; each
wrote its pid into its run dir. Then, by the plan's `delay`: a rank of the picked node
SIGKILLed, or SIGSTOPped, or nothing. The invariants: the cluster sees the ranks run (no
decision while they train: steps advance), a hit is torn down with the decision naming
its node (failed or orphaned / frozen), and after the teardown and again after the
user's `mntui kill` no rank and no helper is left (by the pids they wrote: no tag finds
them), as well as everything the other cluster faults check (bench/chaos_cluster.py's
`the_end`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from chaos_checks import Violation, check_decision, check_no_decision, check_steps_advanced
from chaos_cluster import DOWN, finished, run_dir, steps, the_end
from chaos_fault import Fault, HarnessError, signal_each
from chaos_job import Profile, until
from fakecluster import alive

from mntui.sessions.runs import RunRecord

HITS = ("kill", "freeze", "none")  # by int(delay): delay is uniform in [0, 3)
WATCHED = 6.0  # seconds the renamed job trains before the hit: 3 x frozen_after
STEPS = 5  # at least, per node, in that time (0.3 s a step)
JOB_ARGS = {"renamed-job": "--rename --helper"}
PROFILES = {"renamed-job": (Profile.CLUSTER,)}


def _pids(f: Fault, rec: RunRecord) -> dict[str, dict[str, int]]:
    """node -> {"rank": pid, "helper": pid}, as each wrote them (one rank a node)."""
    out: dict[str, dict[str, int]] = {}
    for n in rec.nodes:
        for path in run_dir(f, rec, n.node).glob("*-[0-9]*.pid"):
            try:
                out.setdefault(n.node, {})[path.name.split("-")[0]] = int(path.read_text())
            except (OSError, ValueError):
                continue
    return out


def _all(pids: dict[str, dict[str, int]]) -> list[int]:
    return [p for by_role in pids.values() for p in by_role.values()]


def _hidden(pid: int) -> bool:
    """Renamed: the environment holds no tag (nor anything else of its own)."""
    try:
        return b"MNTUI_RUN=" not in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def _left(f: Fault, pids: dict[str, dict[str, int]], phase: str) -> None:
    for node, by_role in pids.items():
        left = alive(by_role.values())
        if left:
            roles = [r for r, p in by_role.items() if p in left]
            f.bad([Violation("processes", node, f"the job's {'/'.join(roles)} {left} left: "
                             "renamed, untagged")], phase)  # fmt: skip


def renamed_job(f: Fault) -> None:
    pids: dict[str, dict[str, int]] = {}
    try:
        rec, node = f.target()
        want = len(rec.nodes)
        got = until(lambda: len(_all(p := _pids(f, rec))) == 2 * want and p, 30, f.dl, 0.2)
        if not got:
            raise HarnessError(f"the ranks and helpers never wrote their pids: {_pids(f, rec)}")
        pids = got
        if not all(_hidden(p) for p in _all(pids)):
            raise HarnessError("a rank or helper still carries the tag: no setproctitle here?")
        before = steps(f, rec)
        until(lambda: False, WATCHED, f.dl, 0.5)
        after = steps(f, rec)
        hit = HITS[min(len(HITS) - 1, int(f.plan.delay))]
        f.say(f"renamed ranks and helpers {pids}; steps {before} -> {after}; hit: {hit} {node}")
        f.bad(check_no_decision(finished(f, rec), "a renamed job training"), "renamed")
        f.bad(check_steps_advanced(before, after, STEPS), "renamed")
        if hit != "none":
            sig = signal.SIGKILL if hit == "kill" else signal.SIGSTOP
            signal_each([pids[node]["rank"]], sig)
            d = until(lambda: finished(f, rec), DOWN, f.dl, 0.2)
            down = until(lambda: not alive(_all(pids)), 20, f.dl, 0.2)
            f.say(f"{sig.name} rank {pids[node]['rank']} on {node}: decision "
                  f"{(d or {}).get('node')} {(d or {}).get('state')}; "
                  f"everything renamed {'gone' if down else 'NOT gone'}")  # fmt: skip
            states = ("failed", "orphaned") if hit == "kill" else ("frozen",)
            f.bad(check_decision(d, node, states), "the decision")
            _left(f, pids, "after the teardown")
        the_end(f)
        _left(f, pids, "after mntui kill")
    finally:
        for p in alive(_all(pids)):
            signal_each([p], signal.SIGCONT)
            signal_each([p], signal.SIGKILL)


KINDS: dict[str, Callable[[Fault], None]] = {"renamed-job": renamed_job}
