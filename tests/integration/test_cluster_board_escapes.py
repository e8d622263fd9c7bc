"""Issue 39, finding 5: the coordinator's board files on the main are node data (the job
runs as the node's user and can write them). Hostile ones, written after the chain
ended (no coordinator rewrites them), were read by `status`, `report` and `history`
without a crash or a hang and without ESC, C0 or C1; but a right-to-left override
(U+202E) and its kin reached the terminal, where they reorder what the user reads
(CVE-2021-42574). One rule, node/rules/termsafe.py, drops them for both sides."""

from __future__ import annotations

import json
import re
import time

import pytest
from clusterwatch import launched, run_dir, watchers
from fakecluster import FakeCluster, wait_for
from helpers import Cfg
from test_cluster_faults import read_json, told_on_failure
from test_cluster_respawn import first_dir, job_config

pytestmark = pytest.mark.integration

# OSC 0, a screen clear, an 8-bit CSI, CR and BS; the bidi overrides, embeddings,
# isolates and marks, the line and paragraph separators, a zero-width space and a tag
EVIL = (
    "\x1b]0;PWNED\x07\x1b[2J\x9b31m\r\x08X"
    "\u202e\u202a\u2067\u2069\u200e\u200f\u061c\u2028\u2029\u200b\U000e0041Y"
)
# what must not reach a terminal: C0 (but tab and newline), DEL, C1, and the above
CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2066-\u2069\U000e0000-\U000e007f]"
)


def _poison(fake: FakeCluster, job: str) -> None:
    """Every board file the manager reads of an ended chain, and each node's lost.json."""
    coord = first_dir(fake, job) / "coord"
    dec = read_json(coord / "decision.json") or {}
    dec.update(why=EVIL, node="node1", state="failed", decided_by="coordinator",
               request=EVIL, kill={"node1": {"error": EVIL, "found": [[1, EVIL, EVIL]]}})  # fmt: skip
    (coord / "decision.json").write_text(json.dumps(dec) + "\n")
    ch = read_json(coord / "chain.json") or {}
    ch["why"] = EVIL
    for a in ch.get("attempts") or []:
        a["why"] = EVIL
        a["end"] = {"cause": EVIL, "culprit": "node1", "state": "failed"}
    (coord / "chain.json").write_text(json.dumps(ch) + "\n")
    with open(coord / "journal.jsonl", "a") as f:
        entry = {"seq": 99, "t": time.time(), "kind": "state", "node": "node1",
                 "data": {"state": "failed", "why": EVIL}}  # fmt: skip
        f.write(json.dumps(entry) + "\n")
    for node in ("node0", "node1"):
        lost = {"lost_at": time.time(), "why": EVIL}
        (run_dir(fake, job, node) / "lost.json").write_text(json.dumps(lost) + "\n")


def test_hostile_board_files_reach_no_terminal_with_controls_or_bidi(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "node-esc"
    path, _, _ = job_config(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        assert cfg.mntui(path, "kill").returncode == 0
        wait_for(lambda: not watchers(job, "coord"), 20, what="the coordinator gone")
        _poison(fake, job)
        for args in (("status",), ("status", "--json"), ("report",), ("history",)):
            r = cfg.mntui(path, *args, timeout=120)
            out = r.stdout + r.stderr
            assert "Traceback" not in r.stderr, (args, r.stderr[-2000:])
            if "--json" in args:
                json.loads(r.stdout)  # still JSON; its strings may hold anything, escaped
                continue
            assert not CONTROL.findall(out), (args, CONTROL.findall(out), out[-1500:])
            if args == ("status",):  # the hostile text is shown, what lay between X and Y gone
                assert "failed: XY" in out, out[-2000:]
