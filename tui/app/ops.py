"""The app's self-contained operations: port cleanup, the doctor, the failure report.

A base class of the app, kept apart so the app module stays one concept. Like every
operation, each runs its IO in a thread worker and reports through a typed message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App
from textual.notifications import SeverityLevel

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.procs import PortHolder
from mntui.sessions.runs import RunRecord, read_status
from mntui.sessions.ssh import Cluster
from mntui.sessions.termsafe import clean

from .messages import DoctorDone, HoldersFound, Notice, OpDone, ReportReady
from .widgets import ConfirmScreen, ReportScreen

if TYPE_CHECKING:
    from mntui.sessions.doctor import Check

REPORT_TITLE = {
    "saved": "report",
    "none": "no report",
    "live": "live report (a snapshot, not saved)",
}
DOCTOR_VERDICT = {
    ExitCode.OK: "all checks pass",
    ExitCode.DOCTOR_WARN: "warnings",
    ExitCode.DOCTOR_FAIL: "FAILURES",
}


class Operations(App[None]):
    cfg: JobConfig
    cluster: Cluster | None
    busy: str | None
    record: RunRecord | None

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Markup off unless asked for: what the app shows comes from nodes and configs (an
        error text with `[/]` crashed the app; `[@click=app.kill_all]` would be a button),
        and no escape sequence of theirs reaches the terminal (termsafe.py)."""
        message, title = clean(message), clean(title)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def claim(self, what: str | None) -> bool:
        """One operation at a time: True, and `busy` set to `what` (when given), if none
        is under way; otherwise the user is told which one is."""
        if self.busy:
            self.notify(f"{self.busy} in progress", severity="warning")
            return False
        if what is not None:
            self.busy = what
        return True

    def action_cleanup(self) -> None:
        if self.claim("cleanup"):
            self.find_holders()

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def find_holders(self) -> None:
        from mntui.sessions.launch import port_holders

        assert self.cluster is not None
        found = port_holders(self.cfg, self.cluster)
        holders = {n: hs for n, hs in found.succeeded.items() if hs}
        self.post_message(HoldersFound(holders, found.errors))

    def on_holders_found(self, message: HoldersFound) -> None:
        for node, err in message.errors.items():
            self.notify(f"{node}: {err}", severity="error")
        if not message.holders:
            self.busy = None
            self.notify(
                f"ports {', '.join(map(str, self.cfg.all_ports))} are free on every reachable node",
                title="cleanup",
            )
            return
        details = "\n".join(f"{n}: {h.describe()}" for n, hs in message.holders.items() for h in hs)

        def answered(yes: bool | None) -> None:
            if yes:
                self.free(message.holders)
            else:
                self.busy = None

        self.push_screen(
            ConfirmScreen(
                "Free these ports? (only your own processes are killed)", details, "Free"
            ),
            answered,
        )

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def free(self, holders: dict[str, tuple[PortHolder, ...]]) -> None:
        from mntui.sessions.launch import free_ports

        assert self.cluster is not None
        out = free_ports(self.cluster, holders, self.cfg.grace)
        done = [
            f"{n}: killed {' '.join(map(str, pids)) or 'nothing'}"
            + (f", still held: {len(left)}" if left else "")
            for n, (pids, left) in out.succeeded.items()
        ]
        failed = [f"{n}: {error}" for n, error in out.errors.items()]
        self.post_message(
            Notice("; ".join(done + failed), "information" if out.all_ok else "error")
        )
        self.post_message(OpDone())

    def on_op_done(self, message: OpDone) -> None:
        self.busy = None

    def on_notice(self, message: Notice) -> None:
        self.notify(message.text, severity=message.severity)

    def action_doctor(self) -> None:
        if self.claim("doctor"):
            self.notify("running preflight checks on every node...", timeout=3)
            self.run_doctor()

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def run_doctor(self) -> None:
        from mntui.sessions import doctor

        assert self.cluster is not None
        rows = doctor.run_checks(self.cfg, self.cluster)
        self.keep_doctor(rows)
        code = ExitCode(doctor.exit_code(rows))
        summary = doctor.summary_line(rows, len(self.cfg.nodes))  # the CLI's last line
        self.post_message(DoctorDone(f"{doctor.format_rows(rows)}\n\n{summary}", code))

    def keep_doctor(self, rows: list[Check]) -> None:
        """The rows go to the nodes' history, as `mntui doctor`'s do (a node's failed
        checks show in `mntui nodes --history` and the app's `h`); a full disk costs the
        history a row, never the doctor its answer."""
        from dataclasses import asdict

        from mntui.sessions.history import save_doctor

        try:
            save_doctor(self.cfg.job, [asdict(r) for r in rows])
        except OSError as exc:
            self.post_message(Notice(f"doctor results not kept for the history: {exc}", "warning"))

    def on_doctor_done(self, message: DoctorDone) -> None:
        self.busy = None
        self.push_screen(ReportScreen(f"doctor: {DOCTOR_VERDICT[message.code]}", message.text))

    def action_report(self) -> None:
        """The saved failure report of an ended run; for a live one, a fresh report (the
        ranks' stacks and every node's log, nothing killed), which takes a few seconds."""
        if self.record is None:
            self.notify("no run of this job recorded here yet", severity="warning")
        elif self.claim("report"):
            rec = self.record
            if (read_status(rec.job, rec.run_id) or rec.status).is_live:  # the disk's word
                self.notify("taking every rank's stack and log...", timeout=3)
            self.make_report(self.record)

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def make_report(self, record: RunRecord) -> None:
        """As `mntui report` does: a run the cluster watches is synced first and the
        reports of its attempts that ended are saved (watch/mirror.py); then the record
        on disk decides, not ours: the one the app launched says running long after its
        coordinator ended it (issue 29)."""
        from mntui.sessions.report import answer, render, report_now, to_json
        from mntui.sessions.watch.mirror import look
        from mntui.sessions.watch.reading import by_cluster

        cluster = self.cluster
        assert cluster is not None
        if by_cluster(record):
            look(self.cfg, record, cluster)

        def take() -> tuple[str, dict[str, Any]]:
            built = report_now(self.cfg, record, cluster)
            return render(built), to_json(built)

        got = answer(record, take)
        what = REPORT_TITLE[got.shown]
        text = "\n\n".join(part for part in (got.note, got.text) if part)
        self.post_message(ReportReady(f"{what}: {record.job} run {record.run_id}", text))

    def on_report_ready(self, message: ReportReady) -> None:
        self.busy = None
        self.push_screen(ReportScreen(message.title, message.text))
