"""Rules that were written twice, now one each (house: one rule lives in one pure module):
the reason a `restart.quarantine_after` quarantine carries is node/rules/placing.py's whoever
says it (the coordinator's chain, node/chain/swaps.py, and the words the config takes). The spare choice
(placing.place) is pinned in test_restart_policy.py and test_node_spares.py."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from typing import Any

import pytest

from mntui.sessions.config import QuarantineAfter
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch.plan import build_plan
from mntui.sessions.node.chain.swaps import quarantine
from mntui.sessions.node.rules.placing import QuarantineRule, quarantine_why
from mntui.sessions.node.wire.watchcfg import parse

RID = "20260101-000000-aaaa"


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
def test_one_quarantine_reads_in_the_words_the_config_takes(within: float, words: str) -> None:
    """Before: a window of 24h read `within 1d` from the coordinator and `within 1d0h`
    from this machine's supervisor (`1h` and `1h00m`): one rule, in the config's words."""
    why = f"caused 2 failures within {words} (restart.quarantine_after)"
    assert _coordinator_says(within, time.time()) == why
    assert quarantine_why(2, QuarantineAfter(2, within)) == why
