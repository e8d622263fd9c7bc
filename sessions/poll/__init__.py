"""What each node is doing now: one round trip per poll (poller.py, pollscript.py,
pollstate.py) read into a frozen NodeSnapshot, the states derived from it, GPUs and
training progress (progress.py; where the ranks stand: standing.py). Imports launch and
below; decides nothing.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .gpu import Gpu as Gpu
    from .gpu import GpuReading as GpuReading
    from .poller import Poller as Poller
    from .progress import DEFAULT_PATTERN as DEFAULT_PATTERN
    from .progress import ProgressTracker as ProgressTracker
    from .snapshot import NodeSnapshot as NodeSnapshot
    from .snapshot import snapshot_dict as snapshot_dict
    from .standing import NodeProgress as NodeProgress
    from .standing import Pace as Pace
    from .standing import describe as describe
    from .states import NodeState as NodeState
    from .states import Verdict as Verdict
    from .states import derive as derive
    from .states import may_still_run as may_still_run
else:
    __getattr__ = lazy_exports(__name__, __file__)
