"""`status --json`'s rows (poll/snapshot.py snapshot_dict) without dataclasses.asdict's
deep copies: the same JSON, to the byte, as asdict's form gave."""

from __future__ import annotations

import json
from dataclasses import asdict

from mntui.sessions.poll import snapshot_dict
from mntui.sessions.poll.gpu import Gpu, GpuApp, GpuReading
from mntui.sessions.poll.snapshot import JobProc, NodeSnapshot


def _asdict_form(s: NodeSnapshot) -> dict[str, object]:
    d = asdict(s)
    d["new_output"] = s.new_output.decode(errors="replace")
    d["state"], d["why"] = "running", "ok"
    return d


def test_the_rows_are_asdicts_to_the_byte() -> None:
    gpu = Gpu(0, "GPU-1", "H100", 97.0, 1024.0, 81559.0, None, 350.5, 700.0)
    app = GpuApp(10, "GPU-1", 1000.0, "python3", own=True)
    snap = NodeSnapshot(
        "node0", 0, 1.5, True,
        procs=(JobProc(10, 1, "S", None, 12.5, "python3 train.py"), JobProc(11, 10, "R", 99.0, 1.0, "x")),
        ports=(29500,), gpu=GpuReading((gpu,), (app,), ("fell off the bus",)),
        load=(1.0, 2.0, 3.0), new_output=b"step 1\n\xff",
    )  # fmt: skip
    for s in (snap, NodeSnapshot("node1", 1, 2.0, False, error="unreachable")):
        got = snapshot_dict(s, "running", "ok")
        assert json.dumps(got, indent=2) == json.dumps(_asdict_form(s), indent=2)
        assert got == _asdict_form(s)
