"""The restart policy's decisions: causes, exit codes, backoff, give-up, reset, spares."""

from __future__ import annotations

import textwrap

import pytest

from mntui.sessions.config import RestartPolicy
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.history.quarantines import place_here
from mntui.sessions.node.rules.restarts import AttemptEnd, decide, repeat_culprit
from mntui.sessions.poll import NodeState

F, FROZEN, STALLED = NodeState.FAILED, NodeState.FROZEN, NodeState.STALLED
POLICY = RestartPolicy(max=2, backoff=5, backoff_max=12)


def ended(n: int, state: NodeState = F, codes: tuple[int, ...] = (1,), **kw: object) -> AttemptEnd:
    return AttemptEnd(n, f"run{n}", state, kw.pop("culprit", "g1"), codes, **kw)  # type: ignore[arg-type]


def test_backoff_doubles_up_to_the_cap_then_gives_up_after_max() -> None:
    h = [ended(0)]
    assert decide(POLICY, h).restart and decide(POLICY, h).delay == 5
    h.append(ended(1))
    assert decide(POLICY, h).delay == 10 and decide(POLICY, h).why == "restart 2/2"
    h.append(ended(2))
    d = decide(POLICY, h)
    assert not d.restart and d.gave_up and d.why == "gave up after 2 restart(s) in a row"
    assert decide(RestartPolicy(max=9, backoff=5, backoff_max=12), [*h, ended(3)]).delay == 12


@pytest.mark.parametrize(
    ("end", "policy", "why"),
    [
        (ended(0), RestartPolicy(), "restart is off (restart.max is 0)"),
        (ended(0, STALLED, ()), POLICY, "stalled is not in restart.on"),
        (ended(0, F, (0,)), POLICY, "the job exited 0"),
        (ended(0, F, (2,)), POLICY, "exit code 2 is in restart.not_on"),
        (ended(0, F, (127,)), POLICY, "exit code 127 is in restart.not_on"),
        (ended(0, F, (1,)), RestartPolicy(max=1, exit_codes=frozenset({3})),
         "exit code 1 is not in restart.exit_codes"),
        (ended(0, F, (3,)), RestartPolicy(max=1, not_on=frozenset({3})),
         "exit code 3 is in restart.not_on"),
    ],
)  # fmt: skip
def test_what_is_never_restarted(end: AttemptEnd, policy: RestartPolicy, why: str) -> None:
    d = decide(policy, [end])
    assert not d.restart and not d.gave_up and d.why == why


def test_allowed_causes_and_codes_restart() -> None:
    assert decide(POLICY, [ended(0, FROZEN, ())]).restart
    assert decide(RestartPolicy(max=1, exit_codes=frozenset({3})), [ended(0, F, (3,))]).restart
    on_stall = RestartPolicy(max=1, on=frozenset({"stalled"}))
    assert decide(on_stall, [ended(0, STALLED, ())]).restart


def test_progress_for_reset_after_forgets_earlier_failures() -> None:
    policy = RestartPolicy(max=2, backoff=5, reset_after=60)
    h = [ended(0), ended(1), ended(2, progressed_for=61.0)]
    d = decide(policy, h)
    assert d.restart and d.counted == 1 and d.delay == 5
    assert not decide(RestartPolicy(max=2, reset_after=0), h).restart


CFG = textwrap.dedent("""
    job: j
    nodes: [g1, g2, g3]
    master_addr: 10.0.0.1
    command: run
""")


def test_a_node_that_broke_twice_is_swapped_for_a_spare_keeping_ranks() -> None:
    """The supervisor places by the coordinator's rule (placing.place): the spare takes
    the culprit's rank, and here the main may move too, the master following it."""
    cfg = parse_config(CFG + "spares: [s1, s2]\n")
    assert repeat_culprit([ended(0, culprit="g2"), ended(1, culprit="g2")]) == "g2"
    assert repeat_culprit([ended(0, culprit="g2"), ended(1, culprit="g3")]) is None
    assert repeat_culprit([ended(0, culprit="g2")]) is None
    new, p = place_here(cfg, [ended(0, culprit="g2"), ended(1, culprit="g2")], ())
    assert [(n.name, n.rank) for n in new.nodes] == [("g1", 0), ("s1", 1), ("g3", 2)]
    assert p.said == ("g2 broke twice in a row: replaced by spare s1 (rank 1)",)
    assert new.main == "g1" and new.master_addr == "10.0.0.1" and p.stop is None
    again, p = place_here(new, [ended(2, culprit="g1"), ended(3, culprit="g1")], ())
    assert [(n.name, n.rank) for n in again.nodes] == [("s2", 0), ("s1", 1), ("g3", 2)]
    assert again.main == "s2" and again.master_addr is None  # follows the new main
    last, p = place_here(again, [ended(4, culprit="g3"), ended(5, culprit="g3")], ())
    assert last == again and p.stop is None  # no spare left: it keeps its rank, said so
    assert p.said == ("g3 broke twice in a row, but no spare can take rank 2 "
                      "(s1: in use; s2: in use): it keeps rank 2",)  # fmt: skip
    once, p = place_here(cfg, [ended(0, culprit="g2")], ())
    assert once == cfg and p.said == ()


def test_a_launch_here_places_spares_as_the_cluster_does() -> None:
    """The rule the cluster applies, here too: a spare of another process count is
    refused (the world size stays), a quarantined one is never swapped in, and a
    quarantined node with no spare left ends the chain with the cluster's line."""
    twice = [ended(0, culprit="g2"), ended(1, culprit="g2")]
    cfg = parse_config(CFG + "nproc_per_node: 2\nspares: [{name: s1, nproc_per_node: 4}]\n")
    new, p = place_here(cfg, twice, ())
    assert new == cfg and p.said == ("g2 broke twice in a row, but no spare can take rank 1 "
                                     "(s1: runs 4 process(es), not 2): it keeps rank 1",)  # fmt: skip
    cfg = parse_config(CFG + "spares: [s1, s2]\n")
    new, p = place_here(cfg, twice, {"s1"})
    assert [n.name for n in new.nodes] == ["g1", "s2", "g3"]
    new, p = place_here(cfg, [ended(0, culprit="g3")], {"g3"})  # quarantined: used no more
    assert [n.name for n in new.nodes] == ["g1", "g2", "s1"] and "g3 is quarantined" in p.said[0]
    _, p = place_here(cfg, [ended(0, culprit="g3")], {"g3", "s1", "s2"})
    assert (
        p.stop
        == "g3 is quarantined and no spare can take rank 2 (s1: quarantined; s2: quarantined)"
    )
