"""Snapshot -> Rich text, as pure functions: the widgets call these and do nothing else.

Kept apart from the widgets so the 64-node scale benchmark and the tests can render
without an app, and so one place decides what a node looks like in every view.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.text import Text

from mntui.sessions.launch import session_name
from mntui.sessions.poll import Gpu, GpuReading, NodeProgress, NodeSnapshot, NodeState, Verdict
from mntui.tui import cells

STATE_STYLE = {
    NodeState.STARTING: "bold cyan",
    NodeState.RUNNING: "bold green",
    NodeState.FINISHED: "bold blue",
    NodeState.FAILED: "bold white on red",
    NodeState.ORPHANED: "bold magenta",
    NodeState.STALLED: "bold yellow",
    NodeState.FROZEN: "bold white on dark_orange3",
    NodeState.UNREACHABLE: "bold grey50",
    NodeState.NOT_RUNNING: "grey50",
}
BARS = " ▏▎▍▌▋▊▉█"
SLOW_STYLE = "bold black on yellow"
STALE_STYLE = "bold white on grey37"  # a pane whose data the cluster has not refreshed
WRAP_ROWS = 3  # rows one log line may take in a pane; past them it is cut, marked `…`
_WRAPPER = Console(file=io.StringIO(), width=WRAP_ROWS * 200)  # Text.wrap asks for one


def bar(fraction: float | None, width: int = 10, style: str = "green") -> Text:
    """A busy GPU is a healthy one: utilization is drawn in one colour, not as a warning."""
    if fraction is None:
        return Text("?".center(width), style="grey50")
    fraction = max(0.0, min(1.0, fraction))
    full, rem = divmod(round(fraction * width * 8), 8)
    body = "█" * full + (BARS[rem] if full < width and rem else "")
    return Text(body.ljust(width), style=f"{style} on grey19")


def _num(value: float | None, fmt: str, unit: str) -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def gpu_line(g: Gpu, foreign: int = 0) -> Text:
    t = Text(f"GPU{g.index if g.index is not None else '?'} ")
    t.append_text(bar(g.util / 100 if g.util is not None else None))
    t.append(f" {_num(g.util, '3.0f', '%')}")
    if g.mem_used is not None and g.mem_total:
        frac = g.mem_used / g.mem_total
        t.append(
            f" {g.mem_used / 1024:5.1f}/{g.mem_total / 1024:.0f}G",
            style="bold red" if frac > 0.97 else "",
        )
    else:
        t.append(" mem ?")
    if g.temperature is not None:  # fields a card does not report are left out, not shown as 0
        t.append(f" {g.temperature:.0f}°C", style="bold red" if g.temperature >= 85 else "")
    if g.power is not None:
        t.append(f" {g.power:.0f}W")
    if foreign:
        t.append(f" +{foreign} foreign", style="bold yellow")
    return t


def gpu_lines(reading: GpuReading) -> list[Text]:
    lines = [Text(f"! {e}", style="bold red") for e in reading.errors]
    for g in reading.gpus:
        foreign = sum(1 for a in reading.apps_on(g) if not a.own)
        lines.append(gpu_line(g, foreign))
    unplaced = [a for a in reading.foreign_apps if a.gpu_uuid is None]
    if unplaced:
        lines.append(
            Text(
                "foreign GPU processes: "
                + ", ".join(f"{a.pid} {a.process_name}" for a in unplaced[:3]),
                style="bold yellow",
            )
        )
    return lines


def host_line(s: NodeSnapshot) -> Text:
    mem = cells.host_mem(s)
    return Text(f"no GPU  {cells.load(s, 2)}" + (f"  {mem}" if mem else ""), style="grey70")


def title_line(
    node: str,
    rank: int,
    snap: NodeSnapshot | None,
    verdict: Verdict | None,
    progress: NodeProgress | None = None,
    slow: bool = False,
    stale: float | None = None,
) -> Text:
    """The pane's header: state, then the training step and rate as `mntui status` shows
    them (`step 34 @2/s`), `SLOW` on a straggler, then the connection and processes;
    `STALE 37s` first when what it shows is that old (the cluster out of reach)."""
    t = Text(f"{node}", style="bold")
    t.append(f" [{rank}] ", style="grey70")
    if stale is not None:
        t.append(f" STALE {stale:.0f}s ", style=STALE_STYLE)
    if verdict is not None:
        t.append(f" {verdict.state.value} ", style=STATE_STYLE[verdict.state])
    if progress is not None and progress.step is not None:
        t.append(f"  step {cells.step(progress, verdict.state if verdict else None)}", style="bold")
    if slow:
        t.append(" ")
        t.append(" SLOW ", style=SLOW_STYLE)
    if snap is not None and snap.rtt is not None:
        t.append(f"  {cells.rtt(snap)}", style="grey50")
    if snap is not None and snap.reachable:
        t.append(f"  {len(snap.live_procs)} procs", style="grey50")
        if snap.ports:
            t.append("  :" + ",".join(map(str, snap.ports)), style="grey50")
    return t


def pane_text(
    node: str,
    rank: int,
    snap: NodeSnapshot | None,
    verdict: Verdict | None,
    log: list[str],
    height: int,
    progress: NodeProgress | None = None,
    slow: bool = False,
    width: int | None = None,
    straggler: str | None = None,
    stale: float | None = None,
) -> Text:
    """The pane's `height` rows of `width` cells (None: not laid out yet): its header
    (and the straggler's line, in the words of the app's header and `status`, on the
    node it names), then as many of the newest log lines as the rows the header leaves."""
    out = Text()
    out.append_text(title_line(node, rank, snap, verdict, progress, slow, stale))
    if verdict is not None and verdict.state is not NodeState.RUNNING:
        out.append(f"\n{verdict.why}", style="italic grey70")
    if straggler is not None:
        out.append(f"\n{straggler}", style="bold")
    if snap is not None and snap.reachable:
        body = gpu_lines(snap.gpu) if snap.gpu is not None else [host_line(snap)]
        for line in body:
            out.append("\n")
            out.append_text(line)
    used = len(out.wrap(_WRAPPER, width)) if width else out.plain.count("\n") + 1
    for row in log_rows(log, height - used, width):
        out.append("\n")
        out.append_text(row)
    return out


def log_rows(log: list[str], rows: int, width: int | None) -> list[Text]:
    """The newest lines of `log` in at most `rows` rows, oldest first. A long line wraps
    at its spaces over up to WRAP_ROWS rows; one longer still, or the oldest shown when
    it does not fit whole, ends in `…`: a line is never cut without a mark. Rows are
    counted, not lines, so the newest line stays on screen however long the others."""
    if rows <= 0:
        return []
    width = max(8, width or 200)
    shown: list[Text] = []
    for entry in reversed(log):
        left = rows - len(shown)
        if left <= 0:
            break
        cap = min(left, WRAP_ROWS)
        wrapped = Text(entry[: cap * width + 1], style="grey85").wrap(_WRAPPER, width)
        cut = len(wrapped) > cap or len(entry) > cap * width + 1
        lines = list(wrapped)[:cap] or [Text("", style="grey85")]
        if cut:
            last = lines[-1]
            last.rstrip()
            last.truncate(width - 1)
            last.append("…", style="grey50")
        shown[:0] = lines
    return shown


def table_row(
    node: str, rank: int, snap: NodeSnapshot | None, verdict: Verdict | None
) -> tuple[Text | str, ...]:
    """The node's name is a Text: a str cell would be read as Textual markup."""
    state = Text(verdict.state.value, style=STATE_STYLE[verdict.state]) if verdict else Text("?")
    return (Text(node), str(rank), state, *cells.table_cells(snap))


def step_cell(progress: NodeProgress | None, slow: bool, verdict: Verdict | None = None) -> Text:
    """The table's step column: `34 @2/s`, marked on a straggler."""
    cell = Text(cells.step(progress, verdict.state if verdict else None))
    if slow:
        cell.append(" SLOW", style=SLOW_STYLE)
    return cell


def overall_state(views: list[Any], launched: bool, cause: str | None = None) -> str:
    """The header's one-word health: `running 2/2`, `FROZEN on g380 (+1)`, `not launched`.
    `cause`: the node the run's saved report names. It leads, whatever the nodes' order
    and whatever they show now (closed sessions read not-running): the header, the report
    and the toast name one node (issue 29: the header named the main)."""
    verdicts = [(v.node, v.verdict.state) for v in views if v.verdict is not None]
    if not verdicts:
        return "polling..." if launched else "not launched"
    bad = [(node, state) for node, state in verdicts if state.is_problem]
    if cause is not None and any(v.node == cause for v in views):
        state = next((s for node, s in bad if node == cause), NodeState.FAILED)
        others = sum(1 for node, _ in bad if node != cause)
        return f"{state.value.upper()} on {cause}" + (f" (+{others})" if others else "")
    if bad:
        node, state = bad[0]
        return f"{state.value.upper()} on {node}" + (f" (+{len(bad) - 1})" if len(bad) > 1 else "")
    if not launched:  # the nodes answered before a launch (probing.py): not-running all
        return "not launched"
    running = sum(1 for _, s in verdicts if s in (NodeState.RUNNING, NodeState.STARTING))
    if running:
        return f"running {running}/{len(views)}"
    return ", ".join(sorted({s.value for _, s in verdicts}))


def kill_preview(views: list[Any], job: str, grace: float) -> str:
    """What a kill-all will kill, per node, from the last snapshots (no IO: it is a dialog)."""
    lines = []
    for v in views:
        if v.snap is None or not v.snap.reachable:
            lines.append(
                f"{v.node}: {'unreachable now; will be tried' if v.snap else 'not polled yet'}"
            )
            continue
        procs = v.snap.live_procs
        pids = " ".join(str(p.pid) for p in procs[:8]) + (" ..." if len(procs) > 8 else "")
        lines.append(
            f"{v.node}: {len(procs)} process(es) {pids}".rstrip()
            + (f", tmux session {session_name(job, v.node)}" if v.snap.session else "")
        )
    return "\n".join(lines) + (
        "\n\nEvery process tagged with this job, on every node; nothing else. "
        f"SIGTERM, SIGKILL after {grace:g}s."
    )
