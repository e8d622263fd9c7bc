"""Rules that were written twice, now one each (house: one rule lives in one pure module):
the reason a `restart.quarantine_after` quarantine carries reads the same whether the
coordinator counted it (node/swaps.py) or this machine's supervisor did
(history/policy.py). The spare choice (placing.place, here through recover/restart.place_here) is pinned in
test_restart_policy.py and test_node_spares.py."""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import replace
from typing import Any

import pytest
from fakecluster import free_port

from mntui.sessions.config import JobConfig, QuarantineAfter
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.errors import private_dir, state_dir
from mntui.sessions.history import apply_policy, quarantines
from mntui.sessions.launch.plan import build_plan
from mntui.sessions.node.placing import QuarantineRule, quarantine_why
from mntui.sessions.node.swaps import quarantine
from mntui.sessions.node.watchcfg import parse
from mntui.sessions.poll import NodeState
from mntui.sessions.recover import supervise
from mntui.sessions.recover.restart import AttemptEnd
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, load_run

RID = "20260101-000000-aaaa"


def _torn_down_by(node: str, i: int, at: float) -> None:
    """A run of this machine's history that `node` ended at `at` (today: a scan with a
    window opens it)."""
    rid = time.strftime("%Y%m%d-%H%M%S", time.localtime(at)) + f"-{i:04x}"
    d = private_dir(state_dir() / "j" / rid)
    run = {"job": "j", "run_id": rid, "created_at": at, "status": "torn-down",
           "nodes": [{"node": node}, {"node": "g0"}]}  # fmt: skip
    (d / "run.json").write_text(json.dumps(run))
    rep = {"cause_node": node, "cause": "exit code 3", "first_at": at, "ended_at": at + 1,
           "ending": "torn-down", "nodes": [{"node": node, "finding": {"summary": "x"}}]}  # fmt: skip
    (d / "report.json").write_text(json.dumps(rep))


def _coordinator_says(within: float, now: float) -> str:
    """What the coordinator writes in chain.json for two failures of g1 in the chain,
    from the watch file the launch writes."""
    cfg = parse_config("job: j\nnodes: [g0, g1]\ncommand: run\nwatch: {where: cluster}\n"
                       "launch: {ready: port}\nrestart: {max: 3, quarantine_after: {count: 2}}\n")  # fmt: skip
    start = build_plan(cfg, "20261126-010203-abcd", "10.0.0.1").nodes[0].start_script
    text = re.search(r"cat >\"\$d/watch.json\" <<'(\S+)'\n(.*?)\n\1", start, re.S)
    assert text is not None
    wc = replace(parse(json.loads(text.group(2))), quarantine=QuarantineRule(2, within, 3600.0))
    data: dict[str, Any] = {"attempts": [{"end": {"culprit": "g1"}, "ended_at": now - k}
                                         for k in (20, 10)]}  # fmt: skip
    said = quarantine(data, wc, now)
    assert [n for n, _ in said] == ["g1"], said
    return str(data["quarantined"]["g1"]["why"])


@pytest.mark.parametrize(
    ("within", "words"), [(86400.0, "1d"), (5400.0, "90m"), (3600.0, "1h"), (100.0, "100s")]
)
def test_one_quarantine_reads_the_same_from_the_coordinator_and_this_machine(
    within: float, words: str
) -> None:
    """Before: a window of 24h read `within 1d` from the coordinator and `within 1d0h`
    from this machine (`1h` and `1h00m`): now both in the words the config takes."""
    now = time.time()
    for i in range(2):
        _torn_down_by("g1", i, now - 30 + i * 10)
    done = apply_policy("g1", QuarantineAfter(count=2, within=within, hold=3600.0), now=now)
    assert done is not None
    why = f"caused 2 failures within {words} (restart.quarantine_after)"
    assert done.quarantine.why == why == _coordinator_says(within, now)
    assert quarantine_why(2, QuarantineAfter(2, within)) == why


def _supervisor(extra: str, said: list[str]) -> supervise.Supervisor:
    """A supervisor of a here-watched chain whose first attempt (n0, n1) ended."""
    cfg = parse_config(
        "job: one\nnodes: [{name: n0, host: localhost}, {name: n1, host: localhost}]\n"
        f"master_port: {free_port()}\ncommand: sleep 1\nrestart: {{max: 3, backoff: 0}}\n{extra}"
    )
    nodes = [NodeRecord(n, "localhost", i, "s", "t", "/d") for i, n in enumerate(("n0", "n1"))]
    rec = RunRecord("one", RID, "c.yaml", "127.0.0.1", free_port(), nodes,
                    status=RunStatus.TORN_DOWN, chain=RID)  # fmt: skip
    rec.create()
    loaded = load_run("one", RID)
    assert loaded is not None
    return supervise.Supervisor(cfg, loaded, on_event=lambda e: said.append(e.message))


def _launches(monkeypatch: pytest.MonkeyPatch) -> list[JobConfig]:
    """The configs the supervisor launches (nothing is started: the placement is the test)."""
    launched: list[JobConfig] = []

    def relaunch(cfg: JobConfig, **kw: object) -> None:
        launched.append(cfg)
        raise Relaunched

    monkeypatch.setattr(supervise, "launch", relaunch)
    return launched


class Relaunched(Exception):
    pass


def _ended(node: str, attempt: int) -> AttemptEnd:
    return AttemptEnd(attempt, RID, NodeState.FAILED, node, (3,), 0.0, f"{node} exited 3")


def test_here_a_spare_of_another_size_is_refused_with_the_clusters_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the supervisor swapped in any free spare: a spare of 4 processes for a
    node of 1 changed the job's world size. Now the cluster's rule: it keeps its rank."""
    said: list[str] = []
    sup = _supervisor("spares: [{name: n2, host: localhost, nproc_per_node: 4}]\n", said)
    launched = _launches(monkeypatch)
    with contextlib.suppress(Relaunched):
        sup._next((_ended("n1", 0), _ended("n1", 1)))
    assert [n.name for n in launched[0].nodes] == ["n0", "n1"]
    line = ("n1 broke twice in a row, but no spare can take rank 1 (n2: runs 4 process(es), "
            "not 1): it keeps rank 1")  # fmt: skip
    assert any(line in s for s in said), said


def test_here_a_quarantined_node_with_no_spare_left_ends_the_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, each relaunch was refused at its launch (route_around) until `max` was
    spent; now the placement ends the chain at once, with the cluster's line."""
    said: list[str] = []
    sup = _supervisor("spares: [{name: n2, host: localhost}]\n", said)
    for node in ("n1", "n2"):
        quarantines.quarantine_node(node, 3600, "XID 79", who="a@b")
    launched = _launches(monkeypatch)
    assert sup._next((_ended("n1", 0),)) is None
    assert not launched
    assert any("no restart: n1 is quarantined and no spare can take rank 1 (n2: quarantined)"
               in s for s in said), said  # fmt: skip
