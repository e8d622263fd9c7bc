"""Shell completion for bash, zsh and fish: verbs, flags, node names and run ids.

argcomplete, not a static script: the values worth completing are the config's node
names and the job's recorded runs, which only Python reads (the config from `-c` or
./mntui.yaml, the records from the state directory), and a script that asks mntui at
each TAB is never stale after an upgrade. The shell's function runs `mntui` with
_ARGCOMPLETE set; `autocomplete` answers and exits before anything else is imported.
A completer never raises and never connects anywhere: no config, no completions.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def script(shell: str) -> str:
    from argcomplete.shell_integration import shellcode

    return shellcode(["mntui"], shell=shell)


def _config(parsed: argparse.Namespace) -> Any:
    """The config the command line names (or ./mntui.yaml), or None."""
    from mntui.sessions.config import load_config

    from .configpath import DEFAULT_CONFIG

    path = getattr(parsed, "config", None) or DEFAULT_CONFIG
    try:
        return load_config(Path(path)) if Path(path).is_file() else None
    except Exception:  # a completion never shows a traceback: no config, no names
        return None


def node_names(prefix: str, parsed_args: argparse.Namespace, **_: object) -> list[str]:
    cfg = _config(parsed_args)
    return [n.name for n in cfg.nodes if n.name.startswith(prefix)] if cfg else []


def run_ids(prefix: str, parsed_args: argparse.Namespace, **_: object) -> list[str]:
    """The job's recorded runs, newest first."""
    from mntui.sessions.errors import state_dir

    cfg = _config(parsed_args)
    if cfg is None:
        return []
    try:
        found = [p.parent.name for p in (state_dir() / cfg.job).glob("*/run.json")]
    except OSError:
        return []
    return sorted((r for r in found if r.startswith(prefix)), reverse=True)


def _completers() -> dict[str, Callable[..., list[str]]]:
    return {"nodes": node_names, "node": node_names, "run": run_ids}


def attach(parser: argparse.ArgumentParser) -> None:
    """Each verb's node and run arguments get their completer; -c completes YAML files."""
    from argcomplete.completers import FilesCompleter

    yaml_files = FilesCompleter(["yaml", "yml"])
    found = _completers()
    for action in _all_actions(parser):
        if action.dest == "config":
            action.completer = yaml_files  # type: ignore[attr-defined]
        elif action.dest in found:
            action.completer = found[action.dest]  # type: ignore[attr-defined]


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    out = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _all_actions(sub)
    return out


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request and exit; otherwise return at once (one lookup)."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    attach(parser)
    argcomplete.autocomplete(parser)
