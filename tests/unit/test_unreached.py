"""A host this process found unreachable (a connect timeout) fails at once for a while
(sessions/ssh/unreached.py): the status of a cut asked each lost host six times."""

from __future__ import annotations

import time

import pytest

from mntui.sessions.results import NodeError
from mntui.sessions.ssh import unreached


def test_a_timed_out_host_fails_at_once_then_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    unreached.check("n0", "h-cut")  # never tried: no error
    unreached.mark("h-cut", "cannot connect to h-cut: timed out", 5.0)
    now[0] += 2.0
    with pytest.raises(NodeError) as err:
        unreached.check("n0", "h-cut")
    assert err.value.message == (
        "cannot connect to h-cut: timed out (no answer 2 s ago: not tried again)"
    )
    unreached.check("n1", "h-other")  # another host is no business of it
    now[0] += unreached.HOLD * 5.0  # past the hold: tried again
    unreached.check("n0", "h-cut")


@pytest.mark.parametrize(
    ("text", "no_answer"),
    [
        ("ssh: connect to host 10.0.0.9 port 22: Connection timed out", True),
        ("Connection timed out during banner exchange", True),
        ("cannot connect to root@h:22: Error reading SSH protocol banner", True),
        ("ssh: connect to host h port 22: Connection refused", False),
        ("Permission denied (publickey).", False),
    ],
)
def test_only_no_answer_counts(text: str, no_answer: bool) -> None:
    assert unreached.timed_out(text) is no_answer
