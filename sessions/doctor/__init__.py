"""`mntui doctor`: one probe of every node before a launch (probe.py), the verdicts
(checks.py), the allreduce smoke test (smoke.py), the pairs that find a slow
node or link with it (pairs.py), and what a run adds up to (summary.py). Imports
launch and below; only the UI imports it.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .checks import Check as Check
    from .checks import Status as Status
    from .checks import exit_code as exit_code
    from .checks import format_rows as format_rows
    from .pairs import node_rows as node_rows
    from .pairs import pair_checks as pair_checks
    from .pairs import run_pairs as run_pairs
    from .pairs import save_pairs as save_pairs
    from .probe import run_checks as run_checks
    from .smoke import allreduce as allreduce
    from .summary import how_lines as how_lines
    from .summary import summary_line as summary_line
else:
    __getattr__ = lazy_exports(__name__, __file__)
