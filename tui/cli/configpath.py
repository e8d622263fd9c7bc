"""Which file is the job's config when a command names none: ./mntui.yaml.

A module of its own, without the grammar: a cold `status` (prestart.py, quickstatus.py)
finds its config before argparse is loaded, and the grammar (args.py), `init` and the
shell's completion name the same file.
"""

from __future__ import annotations

from pathlib import Path

from mntui.sessions.errors import UsageError

DEFAULT_CONFIG = "mntui.yaml"


def find_config(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if Path(DEFAULT_CONFIG).exists():
        return Path(DEFAULT_CONFIG)
    raise UsageError(
        "no config: pass -c FILE, or write ./mntui.yaml with `mntui init HOST...` "
        "(or from configs/example.yaml); `mntui demo` runs the bundled demo"
    )
