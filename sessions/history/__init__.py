"""Across runs: each node's failure history (blame.py) from every record, report and
doctor result (records.py), quarantines with expiry (quarantines.py), and the goodput
ledger of each restart chain (ledger.py, its values and text goodput.py; the step clock
of stepclock.py).
Imports config and the ground only: pure readers and small atomic writers.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .blame import NodeHistory as NodeHistory
    from .blame import fold as fold
    from .blame import format_histories as format_histories
    from .goodput import ChainLedger as ChainLedger
    from .goodput import format_ledgers as format_ledgers
    from .ledger import chain_line as chain_line
    from .ledger import ledger_of as ledger_of
    from .ledger import ledgers as ledgers
    from .quarantines import Quarantine as Quarantine
    from .quarantines import active_quarantines as active_quarantines
    from .quarantines import prune_quarantines as prune_quarantines
    from .quarantines import quarantine_listing as quarantine_listing
    from .quarantines import quarantine_node as quarantine_node
    from .quarantines import release_node as release_node
    from .quarantines import route_around as route_around
    from .records import save_doctor as save_doctor
    from .records import scan as scan
    from .stepclock import StepClock as StepClock
    from .stepclock import compile_checkpoint as compile_checkpoint
    from .stepclock import note_steps as note_steps
else:
    __getattr__ = lazy_exports(__name__, __file__)
