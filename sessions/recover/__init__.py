"""The restart chain: the supervisor that relaunches a failed run (supervise.py) under
the restart policy's pure decisions (restart.py), reading and marking the chain's
records (chainstate.py); and the stand-by of a run the cluster watches, which goes on
with the chain when its main is lost (standby.py, mainloss.py, mainlook.py,
mainswap.py). Imports watch and below.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .supervise import Supervisor as Supervisor
else:
    __getattr__ = lazy_exports(__name__, __file__)
