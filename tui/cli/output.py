"""The CLI's one writer to the terminal: whole lines, one at a time, even from node threads.

A module of its own, imported by every verb, so there is one lock in the process: a
`say` defined in the module that runs as `__main__` would be a second copy, with a second
lock, for the modules that import it by name. Being the one writer, it is also where node
text (a log line, a report's headline, a py-spy name) is made safe for the terminal
(termsafe.py): what mntui means as an escape sequence is written by `clear_screen` only.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mntui.sessions.termsafe import clean

if TYPE_CHECKING:
    from mntui.sessions.events import Event

_OUT = threading.Lock()  # one writer: node threads report at once (kill, launch, watch)


def say(*parts: object, err: bool = False, end: str = "\n") -> None:
    """print() in one write of a whole line, under one lock for stdout and stderr: events
    from parallel node threads must never splice into each other's lines. It survives a
    closed pipe (`mntui demo | head`): losing our output must never stop the cleanup
    that follows it. Escape sequences and control characters are dropped, newlines and
    tabs kept."""
    _write(clean(" ".join(map(str, parts)) + end), err)


def json_text(data: Mapping[str, object], indent: int | None) -> str:
    """A verb's `--json` document. With `indent`, each top-level key on a line of its own
    and each item of a top-level list (a node, a run) on one line: a person reads a node
    a line, and every part is written by json's C encoder, where json's own indentation
    is pure Python (~18 ms of a 128-node `status --json`, more than its reading of the
    board). Without, one line (`status --watch`'s JSON lines)."""
    import json

    if indent is None:
        return json.dumps(data)
    pad = " " * indent
    parts = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            items = ",\n".join(pad * 2 + json.dumps(v) for v in value)
            parts.append(f"{pad}{json.dumps(key)}: [\n{items}\n{pad}]")
        else:
            parts.append(f"{pad}{json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}"


def clear_screen() -> None:
    """The screen cleared and the cursor home, for `mntui status --watch`'s next table."""
    _write("\033[H\033[2J", False)


def _write(text: str, err: bool) -> None:
    with _OUT:
        try:
            stream = sys.stderr if err else sys.stdout
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
            except OSError:
                pass


def printer(t0: float) -> Callable[[Event], None]:
    return lambda event: say(event.format(t0))
