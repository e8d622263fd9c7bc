"""Shell and grep syntax, as far as the config needs to know it.

Two config values are read by a shell or a regex engine on the node, and a mistake in
either only shows there, minutes into a launch: a placeholder inside quotes in
`command` (its shell quoting is undone by the quotes around it), and a `ready_pattern`
written in Python's regex dialect that `grep -E` reads differently (`\\d` is `d`).
Both are found here, at load time, by the same rules the node applies.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterator

__all__ = ["ere_problem", "quoted_placeholders"]


def quoted_placeholders(
    parsed: list[tuple[str, str | None, str | None, str | None]], quoted: frozenset[str]
) -> Iterator[tuple[str, str]]:
    """Placeholders that need quoting and sit inside '…', $'…' or "…" of the command.

    A small quote-state scanner: a stack of contexts, where `(` (a subshell, `$(`,
    `$((`) opens plain shell again, even inside double quotes, and `#` at the start of
    a word comments out the rest of its line.
    """
    stack = ["plain"]
    prev = " "
    for literal, fname, _, _ in parsed:
        for c in literal:
            stack, prev = _shell_step(stack, prev, c)
        if fname is not None:
            if fname in quoted and stack[-1] in _QUOTES:
                yield fname, _QUOTES[stack[-1]]
            prev = "x" if prev != "\\" else ""


_QUOTES = {"single": "single", "ansi": "$'...'", "double": "double"}
# What opens a context, by the context it is read in.
_OPENS = {
    "plain": {"'": "single", '"': "double", "(": "plain", "#": "comment"},
    "double": {"(": "plain"},
}
_WORD_END = " \t\n;&|()"  # after these, `#` starts a comment
_CLOSES = {"single": "'", "ansi": "'", "double": '"', "comment": "\n", "plain": ")"}


def _shell_step(stack: list[str], prev: str, c: str) -> tuple[list[str], str]:
    """One character of shell: the new context stack, and what `prev` is for the next."""
    top = stack[-1]
    if prev == "\\" and top not in ("single", "comment"):
        return stack, ""  # escaped: no meaning, and it opens nothing after it
    if c == _CLOSES[top] and (top != "plain" or len(stack) > 1):
        return stack[:-1], c
    opened = _OPENS.get(top, {}).get(c)
    if opened == "single" and prev == "$":
        opened = "ansi"
    elif (c == "(" and top == "double" and prev != "$") or (c == "#" and prev not in _WORD_END):
        opened = None
    return ([*stack, opened] if opened else stack), c


# POSIX ERE has none of these: GNU grep -E reads `\d` as `d`, and the launch waits out
# ready_timeout for a line that never comes.
_PY_ESCAPES = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[[:alnum:]_]",
    "W": "[^[:alnum:]_]",
    "s": "[[:space:]]",
    "S": "[^[:space:]]",
    "A": "^",
    "Z": "$",
    "z": "$",
    "t": "a literal tab or [[:blank:]]",
}


def ere_problem(pattern: str) -> str | None:
    """Why grep -E on the node would not do what this pattern says in Python, or None."""
    if "\n" in pattern:
        return "one line only (grep reads each line as a pattern of its own)"
    i = 0
    while i < len(pattern):
        c, nxt = pattern[i], pattern[i + 1 : i + 2]
        if c == "[":
            end = _bracket_end(pattern, i)
            if end < 0:
                break  # unterminated: grep says so below
            if "\\" in pattern[i:end]:
                return "a backslash inside [...] is literal for grep -E: write [0-9], not [\\d]"
            i = end
        elif c == "\\" and (nxt.isalnum() or nxt in ("<", ">", "`", "'")):
            hint = _PY_ESCAPES.get(nxt)
            return f"\\{nxt} is not portable grep -E syntax" + (f": write {hint}" if hint else "")
        elif c == "\\":
            i += 1  # an escaped special character
        elif c == "(" and nxt == "?":
            return "(?...) is Python syntax; grep -E has plain (...) groups only"
        elif c in "*+?}" and nxt == "?":
            return f"{c}? (lazy) is Python syntax; grep -E repeats are greedy"
        i += 1
    return _grep_problem(pattern)


def _bracket_end(pattern: str, start: int) -> int:
    """Index of the `]` closing the bracket expression opened at `start`, or -1."""
    j = start + 1
    j += pattern.startswith("^", j)
    j += pattern.startswith("]", j)  # a `]` first in the list is a member
    while j < len(pattern):
        if pattern[j] == "[" and pattern[j + 1 : j + 2] in (":", "=", "."):
            close = pattern.find(pattern[j + 1] + "]", j + 2)
            if close < 0:
                return -1
            j = close + 2
        elif pattern[j] == "]":
            return j
        else:
            j += 1
    return -1


@functools.lru_cache(maxsize=64)
def _grep_problem(pattern: str) -> str | None:
    """Compile the pattern with the engine that runs it: grep -E (exit 2: bad regex)."""
    try:
        res = subprocess.run(
            ["grep", "-E", "-e", pattern],
            input=b"",
            capture_output=True,
            timeout=10,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        )
    except FileNotFoundError:
        return None  # no local grep: the static checks above are all we can do
    except subprocess.TimeoutExpired:
        return "grep -E took over 10 s to compile it"
    said = res.stderr.decode(errors="replace").strip().splitlines()
    if res.returncode == 2 or said:
        return (said[0].removeprefix("grep: ") if said else "refused by grep -E").strip()
    return None
