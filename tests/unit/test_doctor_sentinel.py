"""The cluster's watch runs a sentinel on each node's bare python3 or, where that one
is missing or older than 3.9, on the one the job's `setup` provides (the launch's rule,
sentinelship.sentinel_python): the doctor reads both answers and says in one line
whether the node can be watched, and if not, that the launch refuses and how to fix it."""

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
    ("lines", "want", "status", "said"),
    [
        ("SENTPY 3.11\nSENTRUN python3", "3.11", Status.PASS, "python3 3.11 runs the cluster's"),
        ("SENTPY 3.9\nSENTRUN python3", "3.9", Status.PASS, "python3 3.9 runs"),
        ("SENTPY 3.8\nSENTRUN /opt/py/bin/python3", "3.8", Status.PASS,
         "python3 3.8 on the login PATH; /opt/py/bin/python3 (after `setup`) runs"),
        ("SENTPY \nSENTRUN /v/bin/python", None, Status.PASS, "no python3 on the login PATH;"),
        ("SENTPY 3.8\nSENTRUN ", "3.8", Status.FAIL, "python3 3.8 on the login PATH and none"),
        ("SENTPY ", None, Status.FAIL, "no python3 on the login PATH and none 3.9 or later"),
    ],
)  # fmt: skip
def test_the_sentinels_python_is_read_and_judged(
    lines: str, want: str | None, status: Status, said: str
) -> None:
    text = "\n".join(f"{M} {line}" for line in lines.split("\n"))
    p = parse_probe(f"{text}\n{M} SCANNED\n", TOKEN)
    assert p.sentinel_python == want and p.malformed == 0
    check = sentinel_check("n1", p)
    assert check.status is status and check.detail.startswith(said), check
    assert "\n" not in check.detail
    if status is Status.FAIL:  # the launch refuses: the fix is the launch's
        assert check.detail.endswith("the launch refuses"), check
        assert "`setup` provide one" in check.fix and "--no-watch" in check.fix, check


@pytest.mark.parametrize("value", ["3.11; rm -rf ~", "python 3.11", "3", "\x1b[2J3.11"])
def test_a_version_of_another_shape_is_malformed_not_trusted(value: str) -> None:
    p = parse_probe(f"{M} SENTPY {value}\n", TOKEN)
    assert p.sentinel_python is None and p.malformed == 1


@pytest.mark.parametrize("value", ["python", "bin/python3", "/x\x1b[2J", "$(reboot)"])
def test_an_interpreter_of_another_shape_is_malformed_not_trusted(value: str) -> None:
    p = parse_probe(f"{M} SENTRUN {value}\n", TOKEN)
    assert p.sentinel_runs_on is None and p.malformed == 1


def test_only_a_cluster_watched_job_checks_the_sentinel() -> None:
    p = parse_probe(f"{M} SENTPY 3.8\n{M} SENTRUN \n{M} WORKDIR ok /w\n", TOKEN)
    here, cluster = _config("here"), _config("cluster")
    assert "sentinel" not in {c.check for c in node_checks("n1", p, here.node("n1"), here)}
    rows = {c.check: c for c in node_checks("n1", p, cluster.node("n1"), cluster)}
    assert rows["sentinel"].status is Status.FAIL
    assert "python3 3.8" in rows["sentinel"].detail
