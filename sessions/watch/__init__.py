"""The cluster's watch, as this machine reads it: how a run is read (reading.py), the
coordinator's board and chain mirrored into the run records (mirror.py, clusterchain.py,
sparesync.py, clusternotify.py), what `status` says of them (fromcluster.py), and the
app's stream from the main (clusterfeed.py, feedparse.py, nodeseen.py). Nothing here
judges or acts on a job: the coordinator on the main does (sessions/node/). Imports
report and below.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .clusterchain import fresh_steps as fresh_steps
    from .fromcluster import away_lines as away_lines
    from .fromcluster import chain_lines as chain_lines
    from .fromcluster import coordinator_done as coordinator_done
    from .fromcluster import decision_lines as decision_lines
    from .fromcluster import missed_lines as missed_lines
    from .fromcluster import straggler_json as straggler_json
    from .fromcluster import straggler_lines as straggler_lines
    from .fromcluster import watch_line as watch_line
    from .mirror import due as due
    from .mirror import look as look
    from .mirror import read_main as read_main
    from .mirror import save_reports as save_reports
    from .mirror import sync as sync
else:
    __getattr__ = lazy_exports(__name__, __file__)
