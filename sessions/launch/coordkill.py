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
from mntui.sessions.procs import run_dir_word
from mntui.sessions.results import GroupResult, NodeError
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Cluster, Node

from .board import STALE, BoardView, board_dir, coord_alive, parse_board
from .kill import KillReport, report_of

ANSWER = 12.0  # seconds past the grace for the coordinator's decision
DECISION_MAX = 4 * 1024 * 1024  # every node's kill report: ~300 bytes a node


def request_script(run_dir: str, grace: float, rid: str) -> str:
    body = shlex.quote(json.dumps({"grace": grace, "at": time.time(), "id": rid}))
    return f"""d={run_dir_word(run_dir)}
umask 077
{coord_alive(run_dir)}
if ! mntui_coord_alive; then echo COORD gone; exit 0; fi
# a coordinator that wrote nothing for STALE seconds is stopped or stuck: not asked
at=$(stat -c %Y "$d/coord/status.json" 2>/dev/null || echo 0)
if [ $(($(date +%s) - at)) -gt {int(STALE)} ]; then echo COORD stale; exit 0; fi
# a file of its own (mktemp: created new, never a FIFO or a link the job put there)
t=$(mktemp "$d/coord/.kill.XXXXXX") && printf '%s' {body} >"$t" &&
  mv -f "$t" "$d/coord/kill" && echo COORD asked
"""


def answer_script(run_dir: str, rid: str, seconds: float) -> str:
    """Waits on the main itself, every 50 ms, until `coord/answered` names this request
    (written after the decision: read by the shell itself, no program a check) or the
    coordinator is gone, then reads the decision alone (the whole board is a dozen
    programs: 0.45 s on the main of a loaded 64-node host). Why on the main: reading the
    board over SSH every 100 ms cost a round trip and a board read each."""
    if not rid.isalnum():
        raise ValueError("a request id is hex")
    tries = max(1, int(seconds / 0.05))
    return f"""d={run_dir_word(run_dir)}
{coord_alive(run_dir)}
i=0 answered=''
while [ "$i" -lt {tries} ]; do
  got=''
  read -r got 2>/dev/null <"$d/coord/answered"
  if [ "$got" = {rid} ]; then answered=1; break; fi
  case $i in *0) mntui_coord_alive || break ;; esac
  i=$((i + 1)); sleep 0.05
done
echo @BOARD
# answered: whether it still runs is no question (it ends after a user's kill)
[ -n "$answered" ] || {{ if mntui_coord_alive; then echo ALIVE yes; else echo ALIVE no; fi; }}
if cd "$d/coord" 2>/dev/null; then
  head -v -c {DECISION_MAX} -- decision.json chain.json 2>/dev/null || :
fi
"""


def _asked(node: Node, cluster: Cluster, script: str, timeout: float) -> str:
    """The script's output, over the main's open connection, else over one fresh ssh
    (no prompt: a node that needs a person gets the ordinary connection)."""
    policy = cluster.policy
    if node.is_local or getattr(node, "is_open", True) or policy.password is not None:
        return node.run(script, timeout=timeout).stdout
    from mntui.sessions.ssh import early
    from mntui.sessions.ssh.oneshot import OneShotNode
    from mntui.sessions.ssh.openssh import oneshot_argv

    argv = oneshot_argv(policy)
    try:  # the one this command started before its config loaded, if it is this one
        once = early.take(node.host, argv) or OneShotNode(node.name, node.host, argv)
    except OSError:
        return node.run(script, timeout=timeout).stdout
    try:
        res = once.run(script, timeout=timeout + policy.connect_timeout)
    except NodeError:
        res = None
    finally:
        once.close()
    if res is not None and res.ok:
        return res.stdout
    # ssh could not (a key a person unlocks, a host key to accept): the ordinary
    # connection; a request that did land is answered or finds the coordinator gone
    return node.run(script, timeout=timeout).stdout


def _report(node: str, res: object) -> KillReport | None:
    """The sentinel's report as a KillReport, when it is a clean one of ours."""
    if not isinstance(res, dict) or "error" in res:
        return None
    report = report_of(node, res)
    return report if report is not None and report.clean else None


def _answer(view: BoardView, rid: str) -> dict[str, Any] | None:
    """The coordinator's answer to this request (its id), once every node reported."""
    d = view.decision
    ok = d and d.get("request") == rid and "ended_at" in d and isinstance(d.get("kill"), dict)
    return d["kill"] if ok else None  # type: ignore[index]


Mirror = Callable[[RunRecord, BoardView], RunRecord]  # watch/mirror.sync, the caller's


def kill_via_coordinator(
    record: RunRecord,
    cluster: Cluster,
    grace: float,
    on_event: Callable[[Event], None],
    mirror: Mirror | None = None,
) -> GroupResult[KillReport] | None:
    """The sentinels' clean reports per node; None when the coordinator is not there
    to ask (the caller kills everything directly). The request and the wait for its
    answer are one script: one round trip, over a fresh ssh when the main's connection
    is not open yet (a cold `mntui kill` then loads no SSH library at all). The answer
    carries the coordinator's chain: `mirror` writes the attempts this machine had not
    seen into its records first (a restart onto a spare while it slept), so the nodes
    named are the ones the coordinator stopped, not the ones this machine last knew."""
    main = record.main
    node = cluster.nodes.get(main.node)
    if node is None:
        return None
    rid, d = secrets.token_hex(8), board_dir(record)
    wait = grace + ANSWER
    ask = request_script(d, grace, rid) + answer_script(d, rid, wait)
    try:
        said = _asked(node, cluster, ask, wait + 10)
    except NodeError:
        return None
    if "COORD asked" not in said:
        return None
    asked = f"asked the coordinator on {main.node}"
    view = parse_board(said.partition("@BOARD\n")[2])
    kills = _answer(view, rid)
    if kills is None:  # no answer in time, or the coordinator went away: the caller kills
        on_event(Event(None, None, Phase.KILLING, f"{asked}: no answer, killing directly"))
        return None
    if mirror is not None and view.chain is not None:
        record = mirror(record, view)
    _note_last_steps(record, view.decision)
    out: GroupResult[KillReport] = GroupResult()
    ranks = {n.node: n.rank for n in record.nodes}
    for name in ranks:  # each node's lines as a direct kill gives them
        report = _report(name, kills.get(name))
        if report is not None:
            on_event(Event(name, ranks.get(name), Phase.KILLING, asked))
            on_event(Event(name, ranks.get(name), Phase.KILLED, report.summary()))
            out[name] = _as_outcome(report)
    return out


def _note_last_steps(record: RunRecord, decision: dict[str, Any] | None) -> None:
    """The attempt's step clock as the coordinator had it at the kill, into its record:
    its training time in the ledger is exact at once, not when a later `status` reads
    the ended chain. A record that cannot be written costs the ledger that much."""
    from functools import partial

    from mntui.sessions.history.stepclock import coordinator_clock, note_plain

    d = decision or {}
    plain = coordinator_clock(d.get("steps"))
    if plain is None or d.get("run") != record.run_id:  # another attempt's clock: not this
        return
    try:
        record.update(partial(note_plain, plain=plain))
    except OSError:
        pass


def _as_outcome(report: KillReport) -> Any:
    from mntui.sessions.results import Outcome

    return Outcome(report.node, value=report)
