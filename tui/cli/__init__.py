"""The headless CLI: `mntui <verb>`'s grammar (args.py), its handlers (entry.py,
job_verbs.py) and text views (views.py, *_view.py), all written through output.py.
Never loads Textual, Rich or the app but through its two doors: `mntui` alone and
`mntui launch` without --no-ui (pyproject's import contracts).
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .entry import main as main
else:
    __getattr__ = lazy_exports(__name__, __file__)
