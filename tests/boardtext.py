"""A coordinator's board as a status reads it, made by the real board script.

Why: tests of what `status` shows from a board need its answer, and a text written by
hand in the tests would keep passing if the script's format moved away from the parser.
The files are written into a coord dir under a temporary $HOME and read by
launch/board.py's own script under `sh` (dash); only its NOW and ALIVE lines, which
come from the clock and from a live coordinator, are set to what the test asks.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from mntui.sessions.launch.board import board_script

RUN_DIR = ".mntui/runs/j/r/n0"


def board_text(
    files: dict[str, object], now: float | None = None, alive: bool = True, gpus: bool = True
) -> str:
    """`files`: a name in coord/ (`status.json`, `journal.jsonl`, ...) and its content:
    bytes as they are, anything else as JSON. None leaves the file out."""
    with tempfile.TemporaryDirectory() as home:
        coord = Path(home) / RUN_DIR / "coord"
        coord.mkdir(parents=True)
        for name, content in files.items():
            if content is None:
                continue
            raw = content if isinstance(content, bytes) else json.dumps(content).encode()
            (coord / name).write_bytes(raw)
        out = subprocess.run(
            ["sh", "-c", board_script(RUN_DIR, gpus=gpus)],
            env={**os.environ, "HOME": home},
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8", "replace")
    lines = [w for w in out.split("\n") if not w.startswith(("NOW ", "ALIVE "))]
    head = [f"ALIVE {'yes' if alive else 'no'}"] + ([f"NOW {int(now)}"] if now is not None else [])
    return "\n".join(head + lines)
