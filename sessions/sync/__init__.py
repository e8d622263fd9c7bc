"""Code sync before a launch (`sync:`): rsync mode and the facade that picks the mode
(rsync.py), git mode (gitsync.py, gitnode.py), and what both share (fanout.py,
relay.py). Imports ssh and below; never the launch that calls it.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .fanout import SyncError as SyncError
    from .rsync import sync_nodes as sync_nodes
else:
    __getattr__ = lazy_exports(__name__, __file__)
