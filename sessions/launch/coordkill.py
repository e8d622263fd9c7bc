"""A user's kill of a run the cluster watches: one request to its coordinator.

Why: a kill node by node over SSH costs a handshake per node (2.5 s at 64 nodes); the
sentinels are already connected to the coordinator and each kills its own node by tag,
all at once. The request is a file the node's own user writes on the main over one SSH
connection (as authenticated as that account); the coordinator answers in its
decision. A node whose sentinel did not report a clean kill, or a coordinator that
does not answer, is killed directly by tag as before (`None` / the nodes left out): a
kill never depends on the new parts.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Callable
from typing import Any

from mntui.sessions.events import Event, Phase
from mntui.sessions.procs import ProcInfo, run_dir_word
from mntui.sessions.results import GroupResult, NodeError
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Cluster
from mntui.sessions.termsafe import one_line

from .board import STALE, BoardView, board_dir, board_script, coord_alive, parse_board
from .kill import KillReport

ANSWER = 12.0  # seconds past the grace for the coordinator's decision
WAIT = 3.0  # seconds one call waits on the main for the answer before it reads anyway


def request_script(run_dir: str, grace: float, rid: str) -> str:
    body = shlex.quote(json.dumps({"grace": grace, "at": time.time(), "id": rid}))
    return f"""d={run_dir_word(run_dir)}
umask 077
{coord_alive(run_dir)}
if ! mntui_coord_alive; then echo COORD gone; exit 0; fi
# a coordinator that wrote nothing for STALE seconds is stopped or stuck: not asked
at=$(stat -c %Y "$d/coord/status.json" 2>/dev/null || echo 0)
if [ $(($(date +%s) - at)) -gt {int(STALE)} ]; then echo COORD stale; exit 0; fi
printf '%s' {body} >"$d/coord/kill.tmp" &&
  mv -f "$d/coord/kill.tmp" "$d/coord/kill" && echo COORD asked
"""


def answer_script(run_dir: str, rid: str, seconds: float = WAIT) -> str:
    """Waits on the main itself, every 50 ms, until the decision file carries this
    request's id and its end, or the coordinator is gone, then reads the board once.
    Why on the main: asking for the whole board over SSH every 100 ms cost a round trip
    and a board read each (0.7 s after the coordinator's answer at 64 nodes)."""
    if not rid.isalnum():
        raise ValueError("a request id is hex")
    tries = max(1, int(seconds / 0.05))
    return f"""d={run_dir_word(run_dir)}
{coord_alive(run_dir)}
i=0
while [ "$i" -lt {tries} ]; do
  if grep -qF '"{rid}"' "$d/coord/decision.json" 2>/dev/null &&
    grep -qF '"ended_at"' "$d/coord/decision.json" 2>/dev/null; then break; fi
  case $i in *0) mntui_coord_alive || break ;; esac
  i=$((i + 1)); sleep 0.05
done
echo @BOARD
{board_script(run_dir)}"""


def _report(node: str, res: object) -> KillReport | None:
    """The sentinel's report as a KillReport, when it is a clean one of ours."""
    if not isinstance(res, dict) or "error" in res or res.get("port_holders") or res.get("left"):
        return None
    found = res.get("found")
    if not isinstance(found, list):
        return None
    procs = tuple(
        ProcInfo(f[0], one_line(str(f[1]))[:1], one_line(str(f[2]))[:300])
        for f in found
        if isinstance(f, list) and len(f) == 3 and type(f[0]) is int
    )
    sigkilled = res.get("sigkilled")
    secs = res.get("seconds")
    return KillReport(
        node,
        procs,
        tuple(p for p in sigkilled if type(p) is int) if isinstance(sigkilled, list) else (),
        (),
        res.get("session_killed") is True,
        (),
        float(secs) if isinstance(secs, (int, float)) else 0.0,
    )


def _answer(view: BoardView, rid: str) -> dict[str, Any] | None:
    """The coordinator's answer to this request (its id), once every node reported."""
    d = view.decision
    ok = d and d.get("request") == rid and "ended_at" in d and isinstance(d.get("kill"), dict)
    return d["kill"] if ok else None  # type: ignore[index]


def kill_via_coordinator(
    record: RunRecord, cluster: Cluster, grace: float, on_event: Callable[[Event], None]
) -> GroupResult[KillReport] | None:
    """The sentinels' clean reports per node; None when the coordinator is not there
    to ask (the caller kills everything directly)."""
    main = record.nodes[0]
    node = cluster.nodes.get(main.node)
    if node is None:
        return None
    try:
        rid = secrets.token_hex(8)
        res = node.run(request_script(board_dir(record), grace, rid), timeout=30)
    except NodeError:
        return None
    if "COORD asked" not in res.stdout:
        return None
    on_event(Event(None, None, Phase.KILLING, f"asked the coordinator on {main.node}"))
    end = time.monotonic() + grace + ANSWER
    script = answer_script(board_dir(record), rid)
    while time.monotonic() < end:
        try:
            said = node.run(script, timeout=WAIT + 10).stdout
        except NodeError:
            return None
        view = parse_board(said.partition("@BOARD\n")[2])
        kills = _answer(view, rid)
        if kills is not None:
            break
        if not view.alive:  # it went away without answering: the caller kills directly
            return None
    else:
        return None
    out: GroupResult[KillReport] = GroupResult()
    for n in record.nodes:
        report = _report(n.node, kills.get(n.node))
        if report is not None:
            out[n.node] = _as_outcome(report)
    return out


def _as_outcome(report: KillReport) -> Any:
    from mntui.sessions.results import Outcome

    return Outcome(report.node, value=report)
