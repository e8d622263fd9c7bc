"""Reading nodes' output.log incrementally: one round trip per node per read.

Only bytes past the caller's offset travel, capped per read, so following a chatty
64-node job costs what it prints, not what it has printed so far.
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

from .remote import Node

CHUNK = 256 * 1024


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    offset: int  # offset after this chunk
    size: int  # file size on the node; > offset means more is waiting
    exit_code: int | None


def read_script(run_dir: str, offset: int, limit: int = CHUNK) -> str:
    d = f'"$HOME"/{shlex.quote(run_dir)}'
    # base64 keeps arbitrary bytes (progress bars, partial UTF-8) intact over the text channel.
    return f"""f={d}/output.log
size=$(stat -c %s "$f" 2>/dev/null || echo 0)
echo "SIZE $size"
[ -f {d}/exit_code ] && echo "EXIT $(cat {d}/exit_code)"
echo DATA
tail -c +{offset + 1} "$f" 2>/dev/null | head -c {limit} | base64 -w0
echo
"""


def parse_read(stdout: str, offset: int) -> LogChunk:
    head, _, data = stdout.partition("DATA\n")
    size, code = 0, None
    for line in head.splitlines():
        word, _, rest = line.partition(" ")
        if word == "SIZE" and rest.strip().isdigit():
            size = int(rest)
        elif word == "EXIT" and rest.strip().lstrip("-").isdigit():
            code = int(rest)
    raw = base64.b64decode(data.strip() or b"")
    if size < offset:  # the file was truncated or replaced: start over
        return LogChunk(raw, len(raw), size, code)
    return LogChunk(raw, offset + len(raw), size, code)


def last_lines(node: Node, run_dir: str, n: int) -> tuple[list[str], int]:
    """The last `n` lines of the log and its size (to follow from), in one round trip."""
    f = f'"$HOME"/{shlex.quote(run_dir)}/output.log'
    out = node.run(f"stat -c %s {f} 2>/dev/null || echo 0; tail -n {int(n)} {f} 2>/dev/null").stdout
    size, _, text = out.partition("\n")
    return text.splitlines(), int(size.strip() or 0)


def read_new(node: Node, run_dir: str, offset: int) -> LogChunk:
    return parse_read(node.run(read_script(run_dir, offset)).stdout, offset)


class LineSplitter:
    """Turns byte chunks into whole lines; holds a partial last line until it ends."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[str]:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        return [line.decode(errors="replace").rstrip("\r") for line in lines]

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, b""
        return [rest.decode(errors="replace")] if rest else []
