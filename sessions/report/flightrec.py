"""Reading PyTorch Flight Recorder dumps ourselves: which collective each rank reached.

Every rank of a job launched by mntui records its collectives (TORCH_FR_BUFFER_SIZE);
before a hang's teardown mntui asks for a dump and copies every rank's file into the run
record. torch's own reader (`torchfrtrace`) wants the files in one folder and fails on
gloo dumps (their `pg_config` is empty), so this reads them: per process group, each
rank's last enqueued and completed collective, and the first one not every rank entered
("collective #6 all_reduce (default_pg, 1×float32, train.py:66): rank 1 (g375) never
entered it (last entered: #5); 7 ranks 0,2-7 (g[369,376-381]) waiting since 12:18:20"),
differing ops, sizes or dtypes, and ranks with no dump.

A dump is a pickle that came from a node: data, never code, every part of it bounded
(frparse.py); a file that does not read is counted, never raised. `read` is the pure
core; a report reads through frchild.py, which parses each dump in a child process
within a time budget, and puts the parts together with `assemble`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .consensus import fold_nodes, fold_ranks
from .frparse import MAX_DUMP, Op, Parsed, load, parse

__all__ = ["MAX_DUMP", "Op", "RankDump", "Reading", "assemble", "load", "rank_of", "read"]

_RANK = re.compile(r"(\d{1,7})\Z")


@dataclass(frozen=True)
class RankDump:
    rank: int
    node: str
    ops: Mapping[str, tuple[Op, ...]]  # process group ("0 default_pg") -> its ops, in order
    enqueued: Mapping[str, int]  # process group -> last enqueued collective
    completed: Mapping[str, int]  # process group -> last completed collective


@dataclass(frozen=True)
class Reading:
    dumps: tuple[RankDump, ...]
    malformed: tuple[str, ...]  # files that did not read, "node/name"
    findings: tuple[str, ...]  # most telling first
    culprits: tuple[int, ...]  # ranks that never entered the collective the others wait in
    usual: frozenset[str]  # lines whose collectives completed: the job's usual ones


def rank_of(name: str) -> int | None:
    """The rank a dump file is of: the number its name ends with (torch writes
    `<TORCH_FR_DUMP_TEMP_FILE><rank>`); None for a file that is no rank's dump."""
    m = _RANK.search(name)
    return int(m[1]) if m else None


def read(files: Mapping[tuple[str, str], bytes], world: int | None = None) -> Reading:
    """`files`: (node, file name) -> bytes, parsed here, in this process: every part is
    bounded, but unpickling one can still take forever (frchild.py says how), so the
    report reads a node's dumps through frchild.read_within instead."""
    parsed = {
        key: parse(data) if rank_of(key[1]) is not None else None for key, data in files.items()
    }
    return assemble(parsed, world)


def assemble(
    parsed: Mapping[tuple[str, str], Parsed | None],
    world: int | None = None,
    late: Sequence[str] = (),
) -> Reading:
    """The reading of every dump: (node, file name) -> what it says, None for one that
    did not read; `late`: those ("node/name") that ran out of the time budget."""
    dumps, bad = [], []
    for (node, name), got in sorted(parsed.items()):
        rank = rank_of(name)
        if got is None or rank is None:
            bad.append(f"{node}/{name}")
        else:
            dumps.append(RankDump(rank, node, got.ops, got.enqueued, got.completed))
    dumps = list({d.rank: d for d in dumps}.values())  # a rank dumped twice: the last file
    usual = frozenset(o.site for d in dumps for ops in d.ops.values() for o in ops if o.completed)
    findings, culprits = _compare(dumps, usual)
    have = {d.rank for d in dumps}
    if world and len(have) < world and dumps:
        lost = [r for r in range(world) if r not in have]
        findings.append(f"no dump from rank{'s' if len(lost) > 1 else ''} {fold_ranks(lost)}")
    if bad:
        findings.append(f"{len(bad)} dump(s) unreadable: {', '.join(bad[:4])}")
    if late:
        findings.append(f"{len(late)} dump(s) not read within the time budget: {late[0]}")
    return Reading(tuple(dumps), tuple(bad), tuple(findings), tuple(culprits), usual)


def _compare(dumps: Sequence[RankDump], usual: frozenset[str]) -> tuple[list[str], list[int]]:
    """Per process group: the first collective some rank entered and another did not,
    and the ranks that entered the same one with another op, size or dtype."""
    findings: list[str] = []
    culprits: list[int] = []
    groups = sorted({pg for d in dumps for pg in (*d.ops, *d.enqueued)})
    for pg in groups:
        members = [d for d in dumps if pg in d.enqueued or pg in d.ops]
        if not members:
            continue
        last = {d.rank: d.enqueued.get(pg, max((o.seq for o in d.ops.get(pg, ())), default=0))
                for d in members}  # fmt: skip
        done = {d.rank: d.completed.get(pg, 0) for d in members}
        top = max(last.values())
        if top == min(done.values()):
            continue  # every rank finished all it entered: this group is not stuck
        pending = min(v + 1 for v in done.values())
        entered = [d for d in members if last[d.rank] >= pending]
        missing = [d for d in members if last[d.rank] < pending]
        ops = {d.rank: _find(d.ops.get(pg, ()), pending) for d in entered}
        odd = _mismatched(ops, usual)
        findings += _mismatch_lines(pg, pending, ops, entered)
        findings += _pending_line(pg, pending, ops, entered, missing, last)
        culprits += [d.rank for d in missing] + odd
    return findings, culprits


def _find(ops: Iterable[Op], seq: int) -> Op | None:
    return next((o for o in ops if o.seq == seq), None)


def _pending_line(pg: str, seq: int, ops: Mapping[int, Op | None], entered: Sequence[RankDump],
                  missing: Sequence[RankDump], last: Mapping[int, int]) -> list[str]:  # fmt: skip
    # The op most ranks entered names the collective (a mismatched one has its own line).
    entered_ops = [o for o in ops.values() if o is not None]
    first = max(entered_ops, key=lambda o: sum(x.name == o.name for x in entered_ops), default=None)
    what = f"collective #{seq} {first.name if first else '?'} ({_pg(pg)}"
    what += f", {first.shape}, {first.site})" if first else ")"
    since = [o.created for o in ops.values() if o is not None and o.created is not None]
    at = f" since {time.strftime('%H:%M:%S', time.localtime(min(since)))}" if since else ""
    waiting = f"{_who(entered)} waiting{at}" if entered else "no rank entered it"
    if not missing:
        return [f"{what}: {waiting}, none completed"]
    reached = sorted({last[d.rank] for d in missing})
    got = f" (last entered: #{', #'.join(map(str, reached))})" if reached != [0] else ""
    return [f"{what}: {_who(missing)} never entered it{got}; {waiting}"]


def _mismatched(ops: Mapping[int, Op | None], usual: frozenset[str]) -> list[int]:
    """Ranks whose op at this number differs from the most common one; between as many
    on each side, the one called from a line whose collectives completed before is the
    common one (a barrier nobody else reached is the odd one)."""
    kinds: dict[tuple[str, str], list[Op]] = {}
    ranks: dict[tuple[str, str], list[int]] = {}
    for rank, o in ops.items():
        if o is not None:
            kinds.setdefault((o.name, o.shape), []).append(o)
            ranks.setdefault((o.name, o.shape), []).append(rank)
    if len(kinds) < 2:
        return []
    common = max(kinds, key=lambda k: (len(kinds[k]), any(o.site in usual for o in kinds[k])))
    return sorted(r for k, rs in ranks.items() if k != common for r in rs)


def _mismatch_lines(pg: str, seq: int, ops: Mapping[int, Op | None],
                    entered: Sequence[RankDump]) -> list[str]:  # fmt: skip
    kinds: dict[tuple[str, str, str], list[RankDump]] = {}
    for d in entered:
        o = ops.get(d.rank)
        if o is not None:
            kinds.setdefault((o.name, o.shape, o.site), []).append(d)
    if len({(k[0], k[1]) for k in kinds}) < 2:
        return []
    parts = [f"{_who(ds)} {name} {shape} ({site})" for (name, shape, site), ds in kinds.items()]
    return [f"collective #{seq} ({_pg(pg)}) mismatch: " + "; ".join(parts)]


def _pg(key: str) -> str:
    ident, _, desc = key.partition(" ")
    return desc if desc and desc != "undefined" else f"pg {ident}"


def _who(ds: Sequence[RankDump]) -> str:
    ranks = [d.rank for d in ds]
    head = "rank" if len(ranks) == 1 else f"{len(ranks)} ranks"
    return f"{head} {fold_ranks(ranks)} ({fold_nodes(d.node for d in ds)})"
