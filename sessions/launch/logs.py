"""Reading nodes' output.log incrementally: one round trip per node per read.

Only bytes past the caller's offset travel, capped per read, so following a chatty
64-node job costs what it prints, not what it has printed so far.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mntui.sessions.procs import INT, b64_bytes, node_lines, run_dir_word
from mntui.sessions.results import NodeError
from mntui.sessions.ssh import Node
from mntui.sessions.termsafe import clean

CHUNK = 256 * 1024
_SIZE = re.compile(f"SIZE ({INT})", re.ASCII)
_EXIT = re.compile(f"EXIT (-?{INT})", re.ASCII)


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    offset: int  # offset after this chunk
    size: int  # file size on the node; > offset means more is waiting
    exit_code: int | None
    malformed: int = 0  # lines of the node's answer that were no record of ours: skipped


def read_script(run_dir: str, offset: int, limit: int = CHUNK) -> str:
    # base64 keeps arbitrary bytes (progress bars, partial UTF-8) intact over the text
    # channel; the exit code is the job's own file, read as one line and checked here.
    return f"""d={run_dir_word(run_dir)}
size=$(stat -c %s "$d/output.log" 2>/dev/null || echo 0)
echo "SIZE $size"
[ -f "$d/exit_code" ] && {{ read -r rc <"$d/exit_code"; printf 'EXIT %s\\n' "$rc"; }}
echo DATA
tail -c +{offset + 1} "$d/output.log" 2>/dev/null | head -c {limit} | base64 -w0
echo
"""


def parse_read(stdout: str, offset: int) -> LogChunk:
    """`SIZE n`, maybe `EXIT n`, then `DATA` and one line of base64."""
    lines = node_lines(stdout)
    size, code, raw, bad = 0, None, b"", 0
    data_at = lines.index("DATA") + 1 if "DATA" in lines else -1
    for i, line in enumerate(lines):
        if i == data_at:
            got = b64_bytes(line)
            bad += got is None
            raw = got or b""
        elif m := _SIZE.fullmatch(line):
            size = int(m[1])
        elif m := _EXIT.fullmatch(line):
            code = int(m[1])
        elif i + 1 != data_at:  # anything but the one DATA header
            bad += 1
    if size < offset:  # the file was truncated or replaced: start over
        return LogChunk(raw, len(raw), size, code, bad)
    return LogChunk(raw, offset + len(raw), size, code, bad)


def last_lines_script(run_dir: str, n: int) -> str:
    """The log's size on the first line, then its last `n` lines as they are."""
    f = f"{run_dir_word(run_dir)}/output.log"
    return f"stat -c %s {f} 2>/dev/null || echo 0; tail -n {int(n)} {f} 2>/dev/null"


def last_lines(
    node: Node, run_dir: str, n: int, timeout: float | None = None
) -> tuple[list[str], int]:
    """The last `n` lines of the log and its size (to follow from), in one round trip."""
    out = node.run(last_lines_script(run_dir, n), timeout=timeout).stdout
    size, _, text = out.partition("\n")
    return text.splitlines(), int(size) if re.fullmatch(INT, size, re.ASCII) else 0


def log_tail(node: Node, run_dir: str, lines: int = 20) -> str:
    """The log's last lines for a message about a failure already being reported: a log
    that cannot be read is said in the text, never raised."""
    try:
        return "\n".join(last_lines(node, run_dir, lines, timeout=10)[0])
    except NodeError as exc:
        return f"(could not read the log: {exc.message})"


def read_new(node: Node, run_dir: str, offset: int) -> LogChunk:
    return parse_read(node.run(read_script(run_dir, offset)).stdout, offset)


MAX_PENDING = 64 * 1024  # bytes of one line kept: its current `\r` segment's head


class LineSplitter:
    """Turns byte chunks into whole lines; holds a partial last line until it ends.

    Node output is data: a progress bar redrawn with `\\r` and no newline for hours must
    not grow without bound, nor be rescanned whole on every poll. Of a line, finished or
    not, only its current `\\r` segment is kept (what a terminal shows of it: the earlier
    ones are drawn over there too), and of that at most `limit` bytes, its head. What is
    dropped is counted in `dropped`; `pending` is the unfinished line, a bar's latest state.
    """

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self.limit = limit
        self.dropped = 0  # bytes never handed out: overdrawn segments, overlong heads
        self._buf = b""

    def feed(self, data: bytes) -> list[str]:
        if not data:
            return []
        *done, rest = (self._buf + data).split(b"\n")
        self._buf = self._segment(rest)
        return [_text(self._segment(line)) for line in done]

    def pending(self) -> str:
        """The unfinished line: a progress bar's latest state, or ''."""
        return _text(self._buf)

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, b""
        return [_text(rest)] if rest else []

    def _segment(self, line: bytes) -> bytes:
        """The line's last `\\r` segment (a trailing `\\r` ends one, it does not start
        one), cut to `limit` bytes; a cut segment keeps its ending `\\r`, so that what
        follows starts a new segment instead of being dropped as more of this one."""
        cut = line.rstrip(b"\r").rfind(b"\r")
        if cut >= 0:
            self.dropped += cut + 1
            line = line[cut + 1 :]
        if len(line) <= self.limit:
            return line
        keep = line[: self.limit - 1] + b"\r" if line.endswith(b"\r") else line[: self.limit]
        self.dropped += len(line) - len(keep)
        return keep


def _text(line: bytes) -> str:
    """A line as shown (the app's panes, `mntui logs`): no escape sequence of the node's
    reaches a terminal (termsafe.py)."""
    return clean(line.decode(errors="replace").rstrip("\r"))
