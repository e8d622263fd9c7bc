"""The Textual app (main.py): a view and a remote control over the engine, its widgets,
drawing and messages, and the workers that poll, follow the agent and run operations.
Imports the engine and tui/cells.py; never the CLI.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .main import run_app as run_app
else:
    __getattr__ = lazy_exports(__name__, __file__)
