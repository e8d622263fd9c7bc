"""The app's self-contained operations: port cleanup and the doctor.

A base class of the app, kept apart so the app module stays one concept. Like every
operation, each runs its IO in a thread worker and reports through a typed message.
"""

from __future__ import annotations

from textual import work
from textual.app import App

from mntui.sessions.config import JobConfig
from mntui.sessions.procs import PortHolder
from mntui.sessions.remote import Cluster

from .messages import DoctorDone, HoldersFound, Notice, OpDone
from .widgets import ConfirmScreen, ReportScreen


class Operations(App[None]):
    cfg: JobConfig
    cluster: Cluster | None
    busy: str | None

    def action_cleanup(self) -> None:
        if self.busy:
            self.notify(f"{self.busy} in progress", severity="warning")
            return
        self.busy = "cleanup"
        self.find_holders()

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def find_holders(self) -> None:
        from mntui.sessions.kill import port_holders

        assert self.cluster is not None
        found = port_holders(self.cfg, self.cluster)
        self.post_message(
            HoldersFound(
                {n: o.value for n, o in found.items() if o.value},
                {n: o.error or "" for n, o in found.items() if not o.ok},
            )
        )

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
        from mntui.sessions.kill import free_ports

        assert self.cluster is not None
        out = free_ports(self.cluster, holders, self.cfg.grace)
        text = "; ".join(
            f"{n}: killed {' '.join(map(str, o.value[0])) or 'nothing'}"
            + (f", still held: {len(o.value[1])}" if o.value[1] else "")
            if o.value
            else f"{n}: {o.error}"
            for n, o in out.items()
        )
        self.post_message(Notice(text))
        self.post_message(OpDone())

    def on_op_done(self, message: OpDone) -> None:
        self.busy = None

    def on_notice(self, message: Notice) -> None:
        self.notify(message.text, severity=message.severity)  # type: ignore[arg-type]

    def action_doctor(self) -> None:
        if self.busy:
            self.notify(f"{self.busy} in progress", severity="warning")
            return
        self.busy = "doctor"
        self.notify("running preflight checks on every node...", timeout=3)
        self.run_doctor()

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def run_doctor(self) -> None:
        from mntui.sessions import doctor

        assert self.cluster is not None
        rows = doctor.run_checks(self.cfg, self.cluster)
        self.post_message(DoctorDone(doctor.format_rows(rows), doctor.exit_code(rows)))

    def on_doctor_done(self, message: DoctorDone) -> None:
        self.busy = None
        verdict = {0: "all checks pass", 1: "warnings", 2: "FAILURES"}[message.code]
        self.push_screen(ReportScreen(f"doctor: {verdict}", message.text))
