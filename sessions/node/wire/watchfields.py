"""Each section of the watch file (watchcfg.py), read strictly (restart: and written).

Why apart from the file's whole: the watch file grew a section for each part of the
cluster's watch (the judge's rules, restarts, stacks, stragglers, spares and
quarantine); each is checked here field by field, the same way (a wrong type or a
value out of range is one line naming the key, never a watch on wrong rules), and a
section a launch did not write reads as its defaults.
"""

from __future__ import annotations

import re
from typing import Any

from mntui.sessions.node.rules.judging import Rules
from mntui.sessions.node.rules.placing import QuarantineRule
from mntui.sessions.node.rules.restarts import RestartRules

from .epochs import ADDR

FILE = "watch.json"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NONCE = re.compile(r"[0-9a-f]{8,64}\Z")
RANK_TOKEN = re.compile(r"@@MNTUI_RANK_[0-9a-f]{16}@@\Z")


class BadWatchFile(ValueError):
    pass


def get(d: dict[str, Any], key: str, kind: type) -> Any:
    v = d.get(key)
    if kind is float and type(v) is int:
        v = float(v)
    if type(v) is not kind:
        raise BadWatchFile(f"{FILE}: {key} must be a {kind.__name__}")
    return v


def judge_rules(d: object) -> Rules:
    if not isinstance(d, dict):
        raise BadWatchFile(f"{FILE}: rules must be an object")
    stall = d.get("stall_after")
    if stall != "auto":
        stall = get(d, "stall_after", float)
    return Rules(
        frozen_after=get(d, "frozen_after", float),
        unreachable_after=get(d, "unreachable_after", float),
        on_failure=get(d, "on_failure", str),
        on_stall=get(d, "on_stall", str),
        stall_after=stall,
    )


def progress_pattern(v: object) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > 2000:
        raise BadWatchFile(f"{FILE}: progress_pattern must be a regex")
    try:
        if "step" not in re.compile(v).groupindex:
            raise BadWatchFile(f"{FILE}: progress_pattern has no group `step`")
    except re.error:
        raise BadWatchFile(f"{FILE}: progress_pattern is no regex") from None
    return v


def _codes(v: object, what: str) -> frozenset[int]:
    if not isinstance(v, list) or not all(type(c) is int and -256 < c < 256 for c in v):
        raise BadWatchFile(f"{FILE}: restart.{what} must be a list of exit codes")
    return frozenset(v)


def restart_rules(d: object) -> RestartRules | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise BadWatchFile(f"{FILE}: restart must be an object")
    on = d.get("on")
    if not isinstance(on, list) or not all(isinstance(x, str) for x in on):
        raise BadWatchFile(f"{FILE}: restart.on must be a list of states")
    codes = d.get("exit_codes")
    return RestartRules(
        max=get(d, "max", int),
        backoff=get(d, "backoff", float),
        backoff_max=get(d, "backoff_max", float),
        on=frozenset(on),
        exit_codes=None if codes is None else _codes(codes, "exit_codes"),
        not_on=_codes(d.get("not_on"), "not_on"),
        reset_after=get(d, "reset_after", float),
    )


def template(d: dict[str, Any]) -> dict[str, Any]:
    """The restart template's nonce (attemptscript.py) and the count attempt 0 had."""
    nonce, base = d.get("attempt_nonce"), get(d, "restart_base", int)
    if nonce is not None and not (isinstance(nonce, str) and NONCE.match(nonce)):
        raise BadWatchFile(f"{FILE}: attempt_nonce is not one of ours")
    if not 0 <= base < 1 << 31:
        raise BadWatchFile(f"{FILE}: restart_base out of range")
    return {"attempt_nonce": nonce, "restart_base": base}


READY = ("port", "log", "delay")  # launch.ready's modes (config/settings.py ReadyMode)


def readiness(d: dict[str, Any]) -> dict[str, Any]:
    """When a restart's main is up: the launch's rule. The pattern is the config's,
    checked there for `grep -E` (and run by grep on this node, never by `re`)."""
    mode, pattern = d.get("ready"), d.get("ready_pattern")
    delay, timeout = get(d, "ready_delay", float), get(d, "ready_timeout", float)
    if mode not in READY or not 0 <= delay <= 86400 or not 0 < timeout <= 86400:
        raise BadWatchFile(f"{FILE}: ready, ready_delay or ready_timeout out of range")
    if mode == "log" and (
        not isinstance(pattern, str) or not 0 < len(pattern) <= 4096 or "\0" in pattern
    ):
        raise BadWatchFile(f"{FILE}: ready_pattern must be a pattern with ready: log")
    return {"ready": mode, "ready_pattern": pattern if mode == "log" else None,
            "ready_delay": delay, "ready_timeout": timeout}  # fmt: skip


def stacks(d: dict[str, Any]) -> dict[str, Any]:
    """The stacks before a hang's kill: absent from a file that takes none."""
    if d.get("stacks_nonce") is None:
        return {}
    nonce, budget = d.get("stacks_nonce"), get(d, "capture_budget", float)
    if not isinstance(nonce, str) or not NONCE.match(nonce) or not 0 <= budget <= 600:
        raise BadWatchFile(f"{FILE}: stacks_nonce or capture_budget out of range")
    return {"capture_budget": budget, "stacks_nonce": nonce}


def slowness(d: dict[str, Any]) -> dict[str, Any]:
    """The straggler's settings (slowness.py): absent from a file that has none."""
    if "sample_every" not in d:
        return {}
    every, action = get(d, "sample_every", float), d.get("on_slow")
    fraction, after = get(d, "slow_fraction", float), get(d, "slow_after", float)
    ok = 0 <= every <= 3600 and 0 <= fraction <= 1 and 0 < after <= 86400
    if not ok or action not in ("notify", "kill_all"):
        raise BadWatchFile(f"{FILE}: sample_every, on_slow or slow_* out of range")
    return {"sample_every": every, "on_slow": action, "slow_fraction": fraction,
            "slow_after": after}  # fmt: skip


def nprocs(v: object, n: int) -> tuple[int, ...]:
    if v is None:
        return ()
    if (
        not isinstance(v, list)
        or len(v) != n
        or not all(type(x) is int and 0 < x <= 1 << 16 for x in v)
    ):
        raise BadWatchFile(f"{FILE}: nprocs must be a count for each node")
    return tuple(v)


def spares(d: dict[str, Any]) -> dict[str, Any]:
    """The chain's spares and quarantine rule (placing.py): absent from a file without."""
    names, token, q = d.get("spares") or [], d.get("rank_token"), d.get("quarantine")
    if not isinstance(names, list) or not all(
        isinstance(n, str) and NAME.fullmatch(n) for n in names
    ):
        raise BadWatchFile(f"{FILE}: spares must be a list of node names")
    if token is not None and not (isinstance(token, str) and RANK_TOKEN.match(token)):
        raise BadWatchFile(f"{FILE}: rank_token is not one of ours")
    rule = None
    if q is not None:
        if not isinstance(q, dict):
            raise BadWatchFile(f"{FILE}: quarantine must be an object")
        rule = QuarantineRule(get(q, "count", int), get(q, "within", float), get(q, "hold", float))
    return {"spares": tuple(names), "spare_nprocs": nprocs(d.get("spare_nprocs"), len(names)),
            "rank_token": token, "quarantine": rule,
            "spare_addrs": addrs(d.get("spare_addrs"), len(names))}  # fmt: skip


def addrs(v: object, count: int) -> tuple[str, ...]:
    """Where each spare is reached, one a spare (absent: none known, so no spare can
    succeed the main: succession.py)."""
    if v is None:
        return ()
    if (
        not isinstance(v, list)
        or len(v) != count
        or not all(isinstance(a, str) and ADDR.match(a) for a in v)
    ):
        raise BadWatchFile(f"{FILE}: spare_addrs must be one host or address a spare")
    return tuple(v)


def restart_json(r: RestartRules | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "max": r.max,
        "backoff": r.backoff,
        "backoff_max": r.backoff_max,
        "on": sorted(r.on),
        "exit_codes": None if r.exit_codes is None else sorted(r.exit_codes),
        "not_on": sorted(r.not_on),
        "reset_after": r.reset_after,
    }
