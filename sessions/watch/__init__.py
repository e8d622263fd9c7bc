"""The watchdog: the judge's decisions over snapshots (judge.py), the poll loop that
hosts the agent (watchdog.py), the teardown that takes the whole job down
(takedown.py), and its headless start in a local tmux session, confirmed before anyone
says it guards the job (detached.py). Imports agent and below; never the supervisor
above it.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .clusterchain import fresh_steps as fresh_steps
    from .clusterchain import keep_steps as keep_steps
    from .detached import CONFIRM as CONFIRM
    from .detached import Spawned as Spawned
    from .detached import Watcher as Watcher
    from .detached import WatcherFailed as WatcherFailed
    from .detached import confirm as confirm
    from .detached import signals_deferred as signals_deferred
    from .detached import spawn as spawn
    from .detached import start_detached as start_detached
    from .fromcluster import away_lines as away_lines
    from .fromcluster import chain_lines as chain_lines
    from .fromcluster import coordinator_done as coordinator_done
    from .fromcluster import decision_lines as decision_lines
    from .fromcluster import missed_lines as missed_lines
    from .fromcluster import straggler_json as straggler_json
    from .fromcluster import straggler_lines as straggler_lines
    from .fromcluster import watch_line as watch_line
    from .judge import Deadline as Deadline
    from .judge import Judge as Judge
    from .judge import Trigger as Trigger
    from .judge import next_poll as next_poll
    from .judge import threshold_text as threshold_text
    from .mirror import due as due
    from .mirror import save_reports as save_reports
    from .mirror import sync as sync
    from .sampler import Sampler as Sampler
    from .straggler import Tally as Tally
    from .straggler import name_suspect as name_suspect
    from .takedown import teardown as teardown
    from .takedown import user_kills as user_kills
    from .watchdog import LockHeld as LockHeld
    from .watchdog import Watchdog as Watchdog
    from .watchdog import WatchEnd as WatchEnd
    from .watchdog import WatchOutcome as WatchOutcome
    from .watchdog import acquire_lock as acquire_lock
    from .watchdog import make_notifier as make_notifier
else:
    __getattr__ = lazy_exports(__name__, __file__)
