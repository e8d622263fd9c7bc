"""`watch.where: cluster` runs a sentinel on each node's bare python3: the doctor reads
that python3's version (not the job's, after `setup`) and says in one line whether the
node can be watched there, and if not, that the launch watches the run from this machine."""

from __future__ import annotations

import pytest

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.doctor.checks import Status, node_checks, sentinel_check
from mntui.sessions.doctor.probe import parse_probe

TOKEN = "0123456789abcdef"
M = f"@{TOKEN}"


def _config(where: str):  # type: ignore[no-untyped-def]
    return parse_config(
        f"job: j\nnodes: [n0, n1]\ncommand: python train.py\nwatch: {{where: {where}}}\n"
    )


@pytest.mark.parametrize(
    ("line", "want", "status"),
    [
        (f"{M} SENTPY 3.11", "3.11", Status.PASS),
        (f"{M} SENTPY 3.9", "3.9", Status.PASS),
        (f"{M} SENTPY 3.8", "3.8", Status.WARN),
        (f"{M} SENTPY ", None, Status.WARN),
    ],
)
def test_the_sentinels_python_is_read_and_judged(
    line: str, want: str | None, status: Status
) -> None:
    p = parse_probe(f"{line}\n{M} SCANNED\n", TOKEN)
    assert p.sentinel_python == want and p.malformed == 0
    check = sentinel_check("n1", p)
    assert check.status is status, check
    if status is Status.WARN:  # the launch does not fail: it watches from here
        assert "python3 3.9 or later" in check.fix, check
        assert check.detail.endswith("the job will be watched from this machine (keep it on)")
        assert "\n" not in check.detail


@pytest.mark.parametrize("value", ["3.11; rm -rf ~", "python 3.11", "3", "\x1b[2J3.11"])
def test_a_version_of_another_shape_is_malformed_not_trusted(value: str) -> None:
    p = parse_probe(f"{M} SENTPY {value}\n", TOKEN)
    assert p.sentinel_python is None and p.malformed == 1


def test_only_a_cluster_watched_job_checks_the_sentinel() -> None:
    p = parse_probe(f"{M} SENTPY 3.8\n{M} WORKDIR ok /w\n", TOKEN)
    here, cluster = _config("here"), _config("cluster")
    assert "sentinel" not in {c.check for c in node_checks("n1", p, here.node("n1"), here)}
    rows = {c.check: c for c in node_checks("n1", p, cluster.node("n1"), cluster)}
    assert rows["sentinel"].status is Status.WARN
    assert "python3 3.8" in rows["sentinel"].detail
