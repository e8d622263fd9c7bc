"""Where the board of a run the cluster watches is, once its main may have moved: the
coordinator of the highest epoch any node of the chain joined.

Why: a lost main is replaced on the cluster by a spare (node/chain/succession.py), while
this machine may be away; the records here still name the old main, whose board is
gone with it, or says its coordinator stood down (woken from a stop its workers took
for its loss: `main_here`). Every sentinel that joined the next epoch wrote
`epoch.json` in its run dir (node/wire/epochs.py: the epoch, its main, the address), so
one round to the chain's other nodes (the latest attempt's workers and the launch's
spares, in parallel) finds the main that leads now, and its board is read as the
main's is. `status`, `kill`, `report` and the app read the board through here; the
mirror (watch/mirror.sync) then writes the attempts the successor ran into the records,
the new main at rank 0, so the next look goes to its board directly. A pointer is node
data: parsed strictly, and only a main that is a node of the chain is followed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mntui.sessions.node.rules.chainstates import LIVE
from mntui.sessions.node.wire.epochs import EPOCH, Epoch, parse
from mntui.sessions.procs import RUNS_DIR, node_lines, run_dir_word
from mntui.sessions.runs import NodeRecord, RunRecord, load_run

from .board import BoardView, board_script, parse_board
from .sparenote import spares_of

if TYPE_CHECKING:
    from mntui.sessions.config import SshPolicy
    from mntui.sessions.events import Event
    from mntui.sessions.results import GroupResult
    from mntui.sessions.ssh import Node

    from .coordkill import Mirror
    from .kill import KillReport

EPOCH_MAX = 4096  # bytes of a node's epoch.json read (a hundred)
TIMEOUT = 10.0  # seconds for a node's answer, connecting included


def may_have_moved(view: BoardView | None) -> bool:
    """The main's board says nothing of a chain going on there: it did not answer, its
    coordinator is gone or stale, or it stood down for a successor (`main_here`)."""
    if view is None or view.status is None:
        return True
    chain = view.chain
    if chain is not None and chain.get("status") not in LIVE:
        return chain.get("main_here") is True
    return not view.alive or not view.fresh


def pointer_script(run_dir: str) -> str:
    return (
        f"d={run_dir_word(run_dir)}\n"
        f'if [ -f "$d/{EPOCH}" ]; then printf "EPOCH "; '
        f'head -c {EPOCH_MAX} "$d/{EPOCH}" | base64 -w0; echo; else echo NONE; fi\n'
    )


def parse_pointer(out: str) -> Epoch | None:
    """Strictly one line, `NONE` or `EPOCH <base64 of the file>`; anything else is none."""
    lines = node_lines(out)
    if len(lines) != 1 or not lines[0].startswith("EPOCH "):
        return None
    try:
        return parse(json.loads(base64.b64decode(lines[0][6:], validate=True)))
    except (ValueError, TypeError, RecursionError):
        return None


def chain_dir(record: RunRecord, node: str) -> str:
    """`node`'s run dir of the chain, where its watchers write (epoch.json, coord/)."""
    return f"{RUNS_DIR}/{record.job}/{record.chain or record.run_id}/{node}"


def asked(record: RunRecord) -> list[NodeRecord]:
    """The chain's nodes that may know a later epoch: the latest attempt's but its main,
    and the spares the launch noted."""
    first = load_run(record.job, record.chain) if record.chain else record
    spares = spares_of(first) if first is not None else {}
    main = record.main.node
    out = {n.node: n for n in record.nodes if n.node != main}
    out.update({name: n for name, n in spares.items() if name != main and name not in out})
    return list(out.values())


def highest(record: RunRecord, policy: SshPolicy) -> tuple[Epoch, NodeRecord] | None:
    """The highest epoch the chain's other nodes joined, and its main, when that main is
    not the record's (nothing moved: None)."""
    nodes = asked(record)
    if not nodes:
        return None
    got = _ask(nodes, policy, {n.node: pointer_script(chain_dir(record, n.node)) for n in nodes})
    best: Epoch | None = None
    for out in got.values():
        ep = parse_pointer(out) if out is not None else None
        if ep is not None and (best is None or ep.number > best.number):
            best = ep
    if best is None or best.main == record.main.node:
        return None
    where = {n.node: n for n in nodes}.get(best.main)
    return (best, where) if where is not None else None


def successor_board(record: RunRecord, policy: SshPolicy) -> BoardView | None:
    """The board of the coordinator that leads the chain now, when a successor took the
    record's main's place; None when none did (or its board cannot be read)."""
    found = highest(record, policy)
    if found is None:
        return None
    epoch, node = found
    out = _ask([node], policy, {node.node: board_script(chain_dir(record, node.node), True)})
    text = out.get(node.node)
    view = parse_board(text) if text is not None else None
    if view is None or view.status is None or view.chain is None:
        return None
    ok = view.chain.get("chain") == (record.chain or record.run_id)
    return view if ok and view.chain.get("epoch") == epoch.number else None


def _ask(
    nodes: Sequence[NodeRecord], policy: SshPolicy, scripts: dict[str, str]
) -> dict[str, str | None]:
    """Each node's answer over a connection of its own (None: no answer)."""
    from mntui.sessions.config import NodeSpec
    from mntui.sessions.results import NodeError
    from mntui.sessions.ssh import Cluster

    specs = [NodeSpec(name=n.node, host=n.host, rank=max(0, n.rank), command=":") for n in nodes]
    out: dict[str, str | None] = {}
    with Cluster(specs, policy) as cluster:

        def one(node: Node) -> str | None:
            try:
                res = node.run(scripts[node.name], timeout=TIMEOUT)
            except NodeError:
                return None
            return res.stdout if res.ok else None

        for name, outcome in cluster.map(one).items():
            out[name] = outcome.value if outcome.ok else None
    return out


def via_successor(
    record: RunRecord,
    policy: SshPolicy,
    grace: float,
    on_event: Callable[[Event], None],
    mirror: Mirror,
) -> GroupResult[KillReport] | None:
    """A user's kill of a run whose main did not answer: asked of the coordinator that
    leads the chain now, when a successor took the main's place (its attempt written
    into the records first, so the kill names the nodes it stopped); None when none did."""
    from mntui.sessions.config import NodeSpec
    from mntui.sessions.ssh import Cluster

    from .coordkill import kill_via_coordinator

    view = successor_board(record, policy)
    if view is None:
        return None
    latest = mirror(record, view)
    if latest.main.node == record.main.node:
        return None
    main = latest.main
    spec = NodeSpec(name=main.node, host=main.host, rank=0, command=":")
    with Cluster([spec], policy) as side:
        return kill_via_coordinator(latest, side, grace, on_event, mirror)
