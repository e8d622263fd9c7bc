"""tmux session names are one-to-one: two jobs, or two nodes of one job on one host, never
share a session (one's kill would be the other's), and mntui's own sessions (the watchdog,
the tiled view) never meet a node's."""

from __future__ import annotations

import itertools
import random
import re
import string
import subprocess

import pytest

from mntui.sessions.config import ConfigError
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch.tmux import session_name, tiled_session_name

JOB_CHARS = string.ascii_letters + string.digits + "_-"
NODE_CHARS = JOB_CHARS + "."
ALNUM = string.ascii_letters + string.digits


def decode(session: str) -> tuple[str, str]:
    """The left inverse of session_name over valid names: it exists, so no two collide."""
    job, node = session.split("-", 1)
    return job.replace("+", "-"), node.replace(",", ".")


def test_the_reported_collisions_are_gone() -> None:
    assert session_name("a", "b-c") != session_name("a-b", "c")
    assert session_name("job", "n.0") != session_name("job", "n_0")
    assert tiled_session_name("a") not in {session_name("mntui", "all-a")}


def test_common_names_read_as_before() -> None:
    assert session_name("qwen", "g369") == "qwen-g369"
    assert session_name("qwen-sft", "gpu1.example.com") == "qwen+sft-gpu1,example,com"
    assert tiled_session_name("qwen-sft") == "mntui@all-qwen+sft"


def _names(chars: str, first: str, longest: int) -> list[str]:
    return [
        f + "".join(rest)
        for n in range(longest)
        for f in first
        for rest in itertools.product(chars, repeat=n)
    ]


def test_injective_and_disjoint_over_every_short_name() -> None:
    """Every job and node name up to 4 characters over the separators' alphabet."""
    jobs = _names("a-_", "a1", 4)
    nodes = _names("a-._", "a1", 4)
    sessions = {session_name(j, n): (j, n) for j in jobs for n in nodes}
    assert len(sessions) == len(jobs) * len(nodes)
    assert all(decode(s) == jn for s, jn in sessions.items())
    tiled = {tiled_session_name(j) for j in jobs}
    assert len(tiled) == len(jobs) and not (tiled & sessions.keys())


def test_injective_over_random_valid_names() -> None:
    rng = random.Random(10)
    seen: dict[str, tuple[str, str]] = {}
    for _ in range(20000):
        job = rng.choice(ALNUM) + "".join(rng.choices(JOB_CHARS, k=rng.randint(0, 63)))
        node = rng.choice(ALNUM) + "".join(rng.choices(NODE_CHARS, k=rng.randint(0, 127)))
        s = session_name(job, node)
        assert decode(s) == (job, node)
        assert seen.setdefault(s, (job, node)) == (job, node)
        assert "@" not in s  # mntui's own sessions, and only they, have '@'
        assert tiled_session_name(job).startswith("mntui@all-")


def test_names_outside_the_rules_are_escaped_not_merged() -> None:
    """A caller that passes a name outside the config's rules still gets a safe, distinct
    name: tmux would turn '.' and ':' into '_' and expand '#{...}'."""
    odd = [("a", "x/y"), ("a", "x_y"), ("a", "b:c"), ("a", "b_c"), ("a.b", "c"), ("a_b", "c")]
    odd += [("a", "#{pane_pid}"), ("a", "é"), ("a", "%C3%A9"), ("a+b", "c"), ("a-b", "c")]
    sessions = [session_name(j, n) for j, n in odd]
    assert len(set(sessions)) == len(odd)
    assert all(re.fullmatch(r"[A-Za-z0-9_,+%-]+", s) for s in sessions), sessions


ADVERSARIAL = [("a", "b-c"), ("a-b", "c"), ("j", "n.0"), ("j", "n_0"), ("j", "n,0")]


def test_tmux_keeps_every_name_as_given_and_targets_it_exactly() -> None:
    """On a real tmux server (private to the test), each name is its own session."""
    names = [session_name(j, n) for j, n in ADVERSARIAL[:4]]
    names += [tiled_session_name("a"), tiled_session_name("all-a")]
    for name in names:
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "sleep 60"], check=True)
    listed = subprocess.run(
        ["tmux", "list-sessions", "-F", "#{session_name}"], capture_output=True, text=True
    ).stdout.split()
    assert sorted(listed) == sorted(names)
    subprocess.run(["tmux", "kill-session", "-t", f"={names[0]}"], check=True)
    listed = subprocess.run(
        ["tmux", "list-sessions", "-F", "#{session_name}"], capture_output=True, text=True
    ).stdout.split()
    assert sorted(listed) == sorted(names[1:])


def test_a_duplicate_node_is_refused_naming_both() -> None:
    text = "job: j\nnodes:\n  - 'n[1-3]'\n  - {name: n2, host: other}\ncommand: x\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    assert str(info.value) == "c.yaml:4 nodes[1]: duplicate node 'n2': also nodes[0] (line 3)"
