"""How a verb ends when something goes wrong: one line and an exit code, never a
traceback (a bug's goes to the error log).

A module of its own, without the grammar: the whole CLI's verbs end through it
(entry.py), and so does a cold `status` of a run the cluster watches, which answers
before argparse and the CLI's parser are loaded (quickstatus.answer).
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from mntui.sessions.errors import ExitCode, MntuiError, UsageError, log_exception

from .output import say


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


Handlers = dict[int, object]


def unwind_on_signals() -> Handlers:
    """A closed terminal or a `kill` must unwind like Ctrl+C, so a half-done launch is
    stopped and the demo is cleaned up. Returns the handlers it replaced."""
    return {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}


def restore_signals(before: Handlers) -> None:
    """The handlers as before unwind_on_signals (an inherited SIG_IGN, under `nohup`,
    too): a path that hands over to the grammar, which parses outside any handler, must
    not turn a `kill` there into a traceback."""
    for sig, handler in before.items():
        signal.signal(sig, handler)  # type: ignore[arg-type]


def _ignore_interrupts() -> None:
    """Once we are on our way out: a second Ctrl+C must not cut the last line into a
    traceback."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def guarded(verb: str, run: Callable[[], int]) -> int:
    """`run`'s exit code, or the one line and code of what stopped it."""
    try:
        return run()
    except UsageError as exc:
        say(f"mntui: {exc}", err=True)
        return ExitCode.USAGE
    except MntuiError as exc:
        say(f"mntui: {exc}", err=True)
        return ExitCode.FAILED
    except KeyboardInterrupt:
        _ignore_interrupts()
        say("mntui: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # a bug: one line here, the traceback in the error log
        log = log_exception(f"mntui {verb}", exc)
        say(
            f"mntui: internal error: {type(exc).__name__}: {exc}"
            + (f" (traceback in {log})" if log else ""),
            err=True,
        )
        return ExitCode.FAILED
