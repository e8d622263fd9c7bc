"""Name the first meaningful error in one node's training log.

When a multi-node job dies, one rank fails and every other rank then reports a consequence:
NCCL watchdog timeouts, closed gloo sockets, torchrun tearing its children down. The person
at the TUI needs the failure that started it, so findings carry `secondary` and
`first_error` prefers primary ones. Node output is untrusted (huge or binary lines, ANSI
codes, progress bars, interleaved ranks): nothing here raises on it and work is bounded.
A finding is shown (the report, its headline in a toast, the doctor's rows), so its
lines are made terminal-safe first, by the one rule (termsafe.py).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import re
import signal
from collections.abc import Sequence
from typing import NamedTuple, Optional

from .logrules import ANY_NEEDLE, MISTAKES, RULES, Cause, Finding, Rule
from .termsafe import clean

__all__ = ["RULES", "Cause", "Finding", "Rule", "classify", "first_error"]

MAX_LINES = 20_000
MAX_LINE_CHARS = 4_000
# Regex scans run at ~10-50 MB/s: cap the text looked at so a hostile log can't stall a poll.
MAX_TOTAL_CHARS = 4_000_000
MAX_MESSAGE_CHARS = 300
DEDUP_WINDOW = 500  # a repeat of a cause for the same rank this close is the same event
MAX_BLOCK_LINES = 400  # a traceback or torchrun table longer than this is noise, not one block


_PREFIX = re.compile(r"^.{0,120}?\[(?P<kind>rank|default)(?P<num>[0-9]{1,9})\]: ?")
_TEXT_RANK = re.compile(r"\[(?:PG [^\]]{0,60}?)?Rank (?P<num>[0-9]{1,9})\]")
_TB_HEAD = re.compile(r"(?:^Original )?Traceback \(most recent call last\):")
_CHAIN = re.compile(r"^(?:During handling of the above exception|The above exception was the)")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>[0-9]{1,9})(?P<comma>,?) in ')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s*(?P<msg>.*))?$")
_EXC_SUFFIX = ("Error", "Exception", "Interrupt", "Exit", "Failure", "Timeout")
_FAULT_LINE = re.compile(
    r'^(?:Thread 0x|Current thread|Stack \(|\s+File "|\s+<no Python|Extension )'
)
_BLOCK_START = re.compile(r"^(?:\S.*\sFAILED|Failures:|Root Cause \(first observed failure\):)$")
_BLOCK_LINE = re.compile(
    r"^\s*(?:=+|-+|\S.*\sFAILED|Failures:|<NO_OTHER_FAILURES>|Root Cause.*|\[\d+\]:"
    r"|(?P<field>time|host|rank|exitcode|error_file|traceback)\s*:(?P<value>.*))\s*$"
)
_LIBRARY = re.compile(
    r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python\d[\d.]*[/\\]|[/\\]torch[/\\]"
    r"|[/\\]bin[/\\][^/\\]+$|^<"
)
_SEP = re.compile(r"[/\\]")
_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
_GROUP = re.compile(r"\{(\w+)\}")


class _Line(NamedTuple):
    no: int
    text: str
    rank: int | None


_Exc = tuple[Optional[str], Optional[str]]  # exception type, message (3.9: no `|` here)


class _Hit(NamedTuple):
    finding: Finding
    structural: bool  # a whole traceback, dump or torchrun table, not one lone line


def classify(lines: Sequence[str]) -> list[Finding]:
    """Every finding in log order; a traceback, dump or torchrun table is one finding."""
    if isinstance(lines, str):  # a whole text passed by mistake: don't scan it per character
        lines = lines.splitlines()
    hits = [hit for stream in _streams(lines).values() for hit in _scan(stream)]
    return _dedupe(hits)


def first_error(lines: Sequence[str]) -> Finding | None:
    """The root cause is the first primary finding, wherever its consequences landed."""
    findings = classify(lines)
    primary = [f for f in findings if not f.secondary]
    return primary[0] if primary else (findings[0] if findings else None)


def _streams(lines: Sequence[object]) -> dict[str | None, list[_Line]]:
    """Split by rank prefix: interleaved ranks would otherwise splice their tracebacks."""
    streams: dict[str | None, list[_Line]] = {}
    budget = MAX_TOTAL_CHARS
    for no, raw in enumerate(itertools.islice(lines, MAX_LINES)):
        if budget <= 0:
            break
        item = (
            raw[: MAX_LINE_CHARS * 4].decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        )
        # A progress bar redraws at \r, and every state may matter: each is a line of its
        # own, and a sequence ends where its line does (termsafe keeps newlines).
        text = clean(str(item)[: MAX_LINE_CHARS * 2].replace("\r", "\n"))
        text = text[:MAX_LINE_CHARS].rstrip("\n")
        budget -= len(text) + 1
        for segment in text.split("\n"):
            prefix = _PREFIX.match(segment)
            body = segment[prefix.end() :] if prefix else segment
            if body.strip():
                key = f"{prefix['kind']}{prefix['num']}" if prefix else None
                rank = int(prefix["num"]) if prefix else None
                streams.setdefault(key, []).append(_Line(no, body, rank))
    return streams


def _scan(stream: list[_Line]) -> list[_Hit]:
    hits: list[_Hit] = []
    i = 0
    while i < len(stream):
        text = stream[i].text
        hit, end = None, i + 1
        if ("Traceback (most" in text and _TB_HEAD.search(text)) or _frame(text, traceback=True):
            hit, end = _parse_traceback(stream, i)
        elif text.startswith("Fatal Python error: "):
            hit, end = _parse_fault(stream, i)
        elif text.rstrip().endswith(("FAILED", ":")) and _BLOCK_START.match(text.strip()):
            fields, end = _parse_block(stream, i)
            hit = _block_hit(stream[i], fields, None)
        end = max(end, i + 1)
        if hit is None:  # not a finding as a block: judge each of its lines alone
            hits += [h for line in stream[i:end] if (h := _line_hit(line))]
        else:
            hits.append(hit)
        i = end
    return hits


def _frame(text: str, traceback: bool) -> tuple[str, int] | None:
    m = _FRAME.match(text)
    return (m["path"], int(m["line"])) if m and bool(m["comma"]) == traceback else None


def _exception(text: str) -> tuple[str, str] | None:
    m = _EXC.match(text.strip())
    if m is None or (m["msg"] is None and not m["type"].endswith(_EXC_SUFFIX)):
        return None
    return m["type"], (m["msg"] or "").strip()


def _parse_traceback(stream: list[_Line], start: int) -> tuple[_Hit | None, int]:
    """Frames, then `Type: message`; chained and re-raised tracebacks stay one finding."""
    frames: list[tuple[str, int]] = []
    excs: list[tuple[str, str]] = []
    j = start if _frame(stream[start].text, traceback=True) else start + 1
    while j < len(stream) and j - start < MAX_BLOCK_LINES:
        text = stream[j].text
        j += 1
        if frame := _frame(text, traceback=True):
            frames.append(frame)
        elif not text[:1].isspace():  # not a source line or ^^^ markers under a frame
            if (exc := _exception(text)) is None:
                j -= 1
                break
            excs.append(exc)
            chained = j < len(stream) and bool(_CHAIN.match(stream[j].text))
            after = stream[j + chained].text if j + chained < len(stream) else ""
            if not ((chained and _TB_HEAD.match(after)) or after.startswith("Original Traceback")):
                break
            j += chained + 1
    if not frames and not excs:
        return None, start
    fields: dict[str, str] = {}
    if excs and excs[-1][0].endswith("ChildFailedError"):  # torchrun: its table follows
        fields, j = _parse_block(stream, j)
    hit = _block_hit(stream[start], fields, excs[-1][0]) if fields else None
    return hit or _traceback_hit(stream[start], excs, _location(frames[::-1])), j


def _traceback_hit(first: _Line, excs: list[tuple[str, str]], location: str | None) -> _Hit:
    for exc_type, message in excs:  # the earliest known cause in a chain is the root one
        if found := _match(f"{exc_type}: {message}"):
            rule, summary = found
            return _hit(first, rule.cause, rule.secondary, summary, (exc_type, message), location)
    exc_type, message = excs[-1] if excs else ("", "")
    summary = exc_type.rsplit(".", 1)[-1] + (f": {message}" if message else "")
    summary = summary[:120] if excs else "Python traceback without an exception line"
    return _hit(first, Cause.TRACEBACK, False, summary, (exc_type or None, message), location)


def _parse_fault(stream: list[_Line], start: int) -> tuple[_Hit | None, int]:
    """faulthandler lists the crashed thread newest frame first; other threads don't matter."""
    frames: list[tuple[str, int]] = []
    current = True
    j = start + 1
    while j < len(stream) and j - start < MAX_BLOCK_LINES and _FAULT_LINE.match(stream[j].text):
        text = stream[j].text
        current = text.startswith(("Current", "Stack")) or (current and not text.startswith("Thr"))
        if (frame := _frame(text, traceback=False)) and current:
            frames.append(frame)
        j += 1
    if (found := _match(stream[start].text)) is None:
        return None, start
    rule, summary = found
    text = stream[start].text
    return _hit(
        stream[start], rule.cause, rule.secondary, summary, (None, text), _location(frames)
    ), j


def _parse_block(stream: list[_Line], start: int) -> tuple[dict[str, str], int]:
    """torchrun's failure table: the Root Cause entry, else the first failure listed."""
    fields: dict[str, str] = {}
    j = start
    while j < len(stream) and j - start < MAX_BLOCK_LINES:
        if (m := _BLOCK_LINE.match(stream[j].text)) is None:
            break
        if stream[j].text.strip().startswith("Root Cause"):
            fields = {}
        elif m["field"]:
            fields.setdefault(m["field"], m["value"].strip())
        j += 1
    return fields, j


def _block_hit(first: _Line, fields: dict[str, str], exc_type: str | None) -> _Hit | None:
    if (code_m := re.match(r"-?[0-9]{1,9}", fields.get("exitcode", ""))) is None:
        return None
    code = int(code_m.group(0))
    described = f"exitcode {code}"
    with contextlib.suppress(ValueError):
        described += f" ({signal.Signals(-code).name})" if code < 0 else ""
    found = _match(f"failed (exitcode: {code})")  # the same rules as torchrun's own log line
    cause, secondary = (found[0].cause, found[0].secondary) if found else (Cause.TRACEBACK, False)
    if rank_m := re.match(r"[0-9]{1,9}", fields.get("rank", "")):
        first = first._replace(rank=int(rank_m.group(0)))
    summary = f"torchrun: worker failed with {described}"
    return _hit(first, cause, secondary, summary, (exc_type, described), None)


def _line_hit(line: _Line) -> _Hit | None:
    if (found := _match(line.text)) is None:
        return None
    rule, summary = found
    exc: _Exc = _exception(line.text) or (None, line.text)
    hit = _hit(line, rule.cause, rule.secondary, summary, exc, None)
    return hit._replace(structural=False)


def _match(text: str) -> tuple[Rule, str] | None:
    if not ANY_NEEDLE.search(text):  # one pass over the line instead of one per needle
        return None
    for rule in RULES:
        if any(n in text for n in rule.needles) and (m := rule.pattern.search(text)):
            extra = rule.detail.search(text) if rule.detail else None
            groups = {**m.groupdict(), **(extra.groupdict() if extra else {})}
            if sig := groups.get("sig"):
                groups["sig"] = _signal_name(sig)
            return rule, _render(rule.summary, {k: v for k, v in groups.items() if v})
    return None


def _signal_name(sig: str) -> str:
    """`15` (and `-15`, a child's exit code) as `SIGTERM`: Python >= 3.11 prints a signal
    number where it used to print the name."""
    if re.fullmatch("-?[0-9]{1,3}", sig, re.ASCII):
        with contextlib.suppress(ValueError):
            return signal.Signals(abs(int(sig))).name
    return sig


def _render(template: str, groups: dict[str, str]) -> str:
    def optional(m: re.Match[str]) -> str:
        names = _GROUP.findall(m.group(1))
        return m.group(1) if all(n in groups for n in names) else ""

    text = _OPTIONAL.sub(optional, template)
    return _GROUP.sub(lambda m: groups.get(m.group(1), "?"), text)


def _location(frames_newest_first: list[tuple[str, int]]) -> str | None:
    """The user's own newest frame: library frames say where torch noticed, not why."""
    for path, lineno in frames_newest_first:
        if not _LIBRARY.search(path):
            return f"{_SEP.split(path)[-1]}:{lineno}"
    return None


def _hit(
    line: _Line, cause: Cause, secondary: bool, summary: str, exc: _Exc, location: str | None
) -> _Hit:
    exc_type, message = exc
    rank = line.rank
    if rank is None and (m := _TEXT_RANK.search(line.text)):
        rank = int(m["num"])
    first = (message or "").strip().split("\n", 1)[0][:MAX_MESSAGE_CHARS] or None
    where = f" ({location})" if location else ""
    finding = Finding(
        cause,
        summary + where,
        exc_type,
        first,
        location,
        line.no,
        rank,
        secondary,
        cause in MISTAKES,
    )
    return _Hit(finding, structural=True)


def _dedupe(hits: list[_Hit]) -> list[Finding]:
    """A lone line repeating a cause already reported nearby for the same rank is the same
    event; so is torchrun's one-line report of a failure whose table follows."""
    hits = sorted(hits, key=lambda h: h.finding.line)
    blocks: dict[Cause, list[Finding]] = {}
    for hit in hits:
        if hit.structural:
            blocks.setdefault(hit.finding.cause, []).append(hit.finding)
    at = {cause: [b.line for b in found] for cause, found in blocks.items()}  # sorted
    kept: list[Finding] = []
    last: dict[tuple[Cause, int | None], int] = {}
    for hit in hits:
        f = hit.finding
        near = last.get((f.cause, f.rank))
        last[(f.cause, f.rank)] = f.line
        repeated = near is not None and f.line - near <= DEDUP_WINDOW
        nearby = _near_block(f, blocks.get(f.cause, []), at.get(f.cause, []))
        if hit.structural or not (repeated or nearby):
            kept.append(f)
    return kept


def _near_block(f: Finding, blocks: list[Finding], lines: list[int]) -> bool:
    """`lines`: the blocks' lines, for bisect (Python 3.9's has no `key=`)."""
    start = bisect.bisect_left(lines, f.line - DEDUP_WINDOW)
    for b in itertools.takewhile(lambda b: b.line <= f.line + DEDUP_WINDOW, blocks[start:]):
        if b.rank is None or f.rank is None or b.rank == f.rank:
            return True
    return False
