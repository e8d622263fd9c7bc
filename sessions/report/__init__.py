"""What went wrong: evidence and stacks gathered from the nodes, log lines classified into
causes (node/rules/classify.py, node/rules/logrules.py: the coordinator names the first failure by
the same rules), the failure report (failure.py) and the post-mortem that writes it.
Imports poll and below; never the watch wing.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .consensus import waits_in as waits_in
    from .failure import Ending as Ending
    from .failure import FailureReport as FailureReport
    from .failure import killed_at as killed_at
    from .failure import render as render
    from .failure import to_json as to_json
    from .postmortem import HUNG as HUNG
    from .postmortem import Observations as Observations
    from .postmortem import capture_stacks as capture_stacks
    from .postmortem import observations as observations
    from .postmortem import observe as observe
    from .postmortem import report_now as report_now
    from .postmortem import save as save
    from .postmortem import saved_report as saved_report
    from .snapshot import Shown as Shown
    from .snapshot import answer as answer
    from .snapshot import saved_cause as saved_cause
    from .stacks import NodeStacks as NodeStacks
    from .stacks import capture_script as capture_script
    from .stacks import parse_capture as parse_capture
    from .suspect import Finding as Finding
    from .suspect import RankWait as RankWait
    from .suspect import Suspect as Suspect
    from .suspect import Throttle as Throttle
    from .suspect import finding_of as finding_of
    from .suspect import load_finding as load_finding
    from .suspect import save_finding as save_finding
    from .suspect import slow_section as slow_section
else:
    __getattr__ = lazy_exports(__name__, __file__)
