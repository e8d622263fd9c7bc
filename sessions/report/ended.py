"""Whether one poll proves a run over: what a live report (`report_now`) needs before it
says "ended" instead of taking the ranks' stacks.

The cluster's coordinator calls an attempt over when its judge sees nothing that may
still run; a report has one poll, so it asks for positive evidence instead: on
every node, an answer read whole that shows the job's end. The absence of evidence is no
end. A fresh poller's first poll meets a just-started node between tmux's fork and
`exec env MNTUI_RUN=... bash ./launch.sh` (launch/plan.py): its pane lives, no process
carries the tag yet, and `derive` says NOT_RUNNING. A node that did not answer in the
round (a first connection on a loaded machine) says nothing at all, and neither does a
process line that could not be read (lib.sh: such a process is alive, unreadable), so a
node whose answer had malformed lines proves nothing either.
"""

from __future__ import annotations

from collections.abc import Mapping

from mntui.sessions.poll import NodeSnapshot, NodeState, Verdict


def proven_ended(snaps: Mapping[str, NodeSnapshot], verdicts: Mapping[str, Verdict]) -> bool:
    """True only when every node's answer shows the job's end there."""
    return bool(snaps) and all(
        n in verdicts and ended_on(s, verdicts[n].state) for n, s in snaps.items()
    )


def ended_on(snap: NodeSnapshot, state: NodeState) -> bool:
    """An exit code or a dead pane, or no session and no process, in an answer read whole."""
    if not snap.reachable or snap.malformed:
        return False
    if state in (NodeState.FINISHED, NodeState.FAILED):
        return True
    return state is NodeState.NOT_RUNNING and not snap.session
