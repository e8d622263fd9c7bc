"""`mntui doctor`'s last line counts its rows, and `doctor -v` is taken (issue 29), on
real sshd nodes."""

from __future__ import annotations

import json
import re
from collections import Counter

from fakecluster import FakeCluster, free_port
from helpers import Cfg

SUMMARY = re.compile(r"doctor: 2 nodes, (\d+) PASS, (\d+) WARN, (\d+) FAIL in [\d.]+s")


def test_doctor_v_counts_its_rows_and_says_how(fake: FakeCluster, cfg: Cfg) -> None:
    """A wrong interface name fails on both nodes: the counts are the table's, the last
    line; -v says each step on stderr and how each check was made after the table."""
    path = cfg.write(f"""
    job: dsummary
    nodes: [node0, node1]
    master_port: {free_port()}
    env: {{NCCL_SOCKET_IFNAME: nope0}}
    command: sleep 1
    """)
    res = cfg.mntui(path, "doctor", "-v", timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    out = res.stdout.splitlines()
    summary = SUMMARY.fullmatch(out[-1])
    assert summary is not None, res.stdout
    table = out[1 : out.index("how each check was made:")]
    seen = Counter(line.split()[2] for line in table)
    assert [int(n) for n in summary.groups()] == [seen["PASS"], seen["WARN"], seen["FAIL"]]
    assert seen["FAIL"] >= 2 and seen["PASS"] >= 10, table
    how = out[out.index("how each check was made:") + 1 : -1]
    assert any(re.match(r"  ifname\s+NCCL_SOCKET_IFNAME", line) for line in how), how
    assert "doctor: checks: connect over" in res.stderr
    assert re.search(r"doctor: checks: done in [\d.]+s", res.stderr), res.stderr
    res = cfg.mntui(path, "doctor", "--json", timeout=120)
    rows = json.loads(res.stdout)  # still the list scripts read; the counts on stderr
    seen = Counter(r["status"] for r in rows)
    summary = SUMMARY.fullmatch(res.stderr.splitlines()[-1])
    assert summary is not None, res.stderr
    assert [int(n) for n in summary.groups()] == [seen["PASS"], seen["WARN"], seen["FAIL"]]
