"""The headless CLI: `mntui <verb>`'s grammar (args.py), its handlers (entry.py,
job_verbs.py) and text views (views.py, *_view.py), all written through output.py.
Never loads Textual, Rich or the app but through its two doors: `mntui` alone and
`mntui launch` without --no-ui (pyproject's import contracts).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The `mntui` command. Importing the CLI takes a moment in which a Ctrl+C would
    otherwise end in a traceback: it is the same clean line as at any later moment."""
    form = None
    try:
        if argv is None:  # the process's own command line: its one ssh may start now
            from .prestart import prestart

            form = prestart(sys.argv[1:])
        if form is not None and form[0] == "status" and "_ARGCOMPLETE" not in os.environ:
            from .quickstatus import answer

            answer(form[1], "--json" in form[2])  # exits when the board answered
        from .entry import main as run
    except KeyboardInterrupt:
        sys.stderr.write("mntui: interrupted\n")
        return 130  # ExitCode.INTERRUPTED (not imported: it may be what was cut short)
    return run(argv, quick=form is None)
