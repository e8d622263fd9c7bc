"""The rules for the values only a job has: its name, a node's workdir and environment,
the command template, grep and Python patterns, notifications, a git remote.

Each value ends up somewhere unforgiving (a tmux session name, a shell line, a node's
environment, a webhook), so its rule sits next to the names and limits it enforces:
JOB_RE, RESERVED_ENV, TEMPLATE_FIELDS. The settings' fields name these checks; the generic
ones they build on are checks.py's.
"""

from __future__ import annotations

import re
import string
from typing import Any

from mntui.sessions.node.rules.notifyhook import COMMAND_MOST
from mntui.sessions.notify import NotifyEvent, NotifyPolicy, check_webhook_url
from mntui.sessions.shellsyntax import ere_problem, quoted_placeholders

from . import checks as ck
from .yamlmarks import Document, Path_

TEMPLATE_FIELDS = (
    "node_rank",
    "nnodes",
    "master_addr",
    "master_port",
    "nproc_per_node",
    "node",
    "restart_count",
)
# Placeholders whose value may need shell quoting. The others never do: integers, and
# node names, whose characters (NODE_RE) shlex.quote leaves bare.
QUOTED_FIELDS = frozenset({"master_addr"})

JOB_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Names mntui sets itself; letting the config override them would break the job.
RESERVED_ENV = frozenset(
    {
        "NODE_RANK",
        "NNODES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "MNTUI_RUN",
        "MNTUI_RUN_DIR",
        "MNTUI_RESTART_COUNT",
    }
)


def job_name(doc: Document, value: Any, path: Path_) -> str:
    job = ck.text(doc, value, path)
    if not JOB_RE.match(job):
        message = "use letters, digits, '-' and '_' (it names tmux sessions and directories)"
        raise doc.error(path, message)
    return job


def workdir(doc: Document, value: Any, path: Path_) -> str:
    text = ck.text(doc, value, path)
    if text.startswith("~") and text != "~" and not text.startswith("~/"):
        user = text[1:].split("/", 1)[0]
        raise doc.error(
            path, f"~{user} is not expanded (only ~ and ~/ are): write the full path, /home/{user}"
        )
    sync = _rsync(doc.data)
    if sync is not None:
        from .syncguard import FIX, config_refusal, literal_refusal

        # rsync writes where the node reads the path: a glob there writes into what it
        # matches (`*` is `.ssh` too), with or without delete; a delete has more rules
        if sync.get("delete") is True and (why := config_refusal(text)) is not None:
            raise doc.error(path, f"{text} {why}; {FIX}")
        if (why := literal_refusal(text)) is not None:
            raise doc.error(path, f"{text} {why}; sync writes into it")
    return text


def _rsync(data: Any) -> dict[str, Any] | None:
    """The `sync` section in rsync mode, read here so that the refusal names the line of
    the workdir that is unsafe: the top level's, a node's, an override's or a spare's
    (the sync section is read, and checked, before any of them)."""
    sync = data.get("sync") if isinstance(data, dict) else None
    return sync if isinstance(sync, dict) and sync.get("git") is None else None


def env(doc: Document, value: Any, path: Path_) -> dict[str, str]:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping, got {ck.kind(value)}")
    out: dict[str, str] = {}
    for key, v in value.items():
        where = (*path, key)
        if not ENV_RE.match(key):
            raise doc.error(where, "not a valid environment variable name")
        if key in RESERVED_ENV:
            raise doc.error(where, "set by mntui itself; use the matching top-level key")
        text = doc.text(where)  # as written: YAML 1.1 would make 010 into 8, 1:30 into 90
        if v is None or isinstance(v, (dict, list)) or text is None:
            raise doc.error(where, f"expected a string or number, got {ck.kind(v)}")
        if "\0" in text:
            raise doc.error(where, "contains a NUL byte")
        out[key] = text
    return out


def template(doc: Document, value: Any, path: Path_) -> str:
    text = ck.text(doc, value, path)
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        message = f"bad template: {exc} (write {{{{ and }}}} for literal braces)"
        raise doc.error(path, message) from None
    for _, fname, spec, conv in parsed:
        if fname is None:
            continue
        if fname not in TEMPLATE_FIELDS:
            known = ", ".join(f"{{{f}}}" for f in TEMPLATE_FIELDS)
            raise doc.error(path, f"unknown placeholder {{{fname}}}; known: {known}")
        if spec or conv:
            raise doc.error(path, f"placeholder {{{fname}}} takes no format spec or conversion")
    for fname, quote in quoted_placeholders(parsed, QUOTED_FIELDS):
        raise doc.error(
            path,
            f"placeholder {{{fname}}} inside {quote} quotes: it is substituted shell-quoted, "
            f"and inside quotes that quoting is undone; take it out (--x={{{fname}}})",
        )
    return text


def pattern(doc: Document, value: Any, path: Path_) -> str:
    text = ck.text(doc, value, path)
    problem = ere_problem(text)
    if problem is not None:
        raise doc.error(path, f"bad regular expression for grep -E: {problem}")
    return text


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The config's `progress_pattern`, refused with a one-line reason when unusable: a
    Python regex, as mntui itself runs it (poll/progress.py)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    if "step" not in compiled.groupindex:
        raise ValueError("it has no named group `step`: write the number as (?P<step>[0-9]+)")
    return compiled


def progress_pattern(doc: Document, value: Any, path: Path_) -> str:
    text = ck.text(doc, value, path)
    try:
        compile_pattern(text)
    except ValueError as exc:
        raise doc.error(path, str(exc)) from None
    return text


def notify(doc: Document, value: Any, path: Path_) -> NotifyPolicy:
    m = ck.mapping(doc, value, path, {"webhook", "command", "on", "timeout"})
    webhook = ck.text(doc, m["webhook"], (*path, "webhook")) if m.get("webhook") else None
    if webhook is not None and (why := check_webhook_url(webhook)) is not None:
        raise doc.error((*path, "webhook"), why)
    command = ck.text(doc, m["command"], (*path, "command")) if m.get("command") else None
    if command is not None and ("\0" in command or len(command) > COMMAND_MOST):
        what = "contains a NUL byte" if "\0" in command else f"over {COMMAND_MOST} characters"
        raise doc.error((*path, "command"), f"{what}: the coordinator runs it with `sh -c`")
    events = tuple(e.value for e in NotifyEvent)
    on = ck.names_of(events)(doc, m["on"], (*path, "on")) if m.get("on") is not None else events
    timeout = 5.0
    if m.get("timeout") is not None:
        timeout = ck.seconds(positive=True, maximum=600)(doc, m["timeout"], (*path, "timeout"))
    return NotifyPolicy(webhook, command, frozenset(NotifyEvent(e) for e in on), timeout)


def git_remote(doc: Document, value: Any, path: Path_) -> str:
    text = ck.text(doc, value, path)
    if text.startswith("-"):
        raise doc.error(path, f"{text!r} starts with '-': name a remote (origin) or give its URL")
    return text
