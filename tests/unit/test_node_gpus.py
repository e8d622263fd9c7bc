"""A sentinel's GPUs (node/sentinel/gpus.py, node/wire/gpuwire.py): nvidia-smi run bounded in time and
size on a thread of its own, its text sent when it changed, checked by the coordinator and
by the manager, and shown by `status` with the parser and the cell a poll's reading has.

Real processes: the replaying nvidia-smi the fake nodes carry (tests/data/fakebin), and
scripts standing in for an nvidia-smi that hangs, prints garbage or never stops.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from boardtext import board_text
from fakecluster import alive, wait_for
from test_node_watchfiles import GOOD, _cfg, _Channel

from mntui.sessions.launch.board import board_script, parse_board
from mntui.sessions.node.board.coordstate import Board, Peer
from mntui.sessions.node.sentinel import gpus
from mntui.sessions.node.wire import gpuwire
from mntui.sessions.node.wire.gpuwire import GpuText, Malformed, check, from_board, within_board
from mntui.sessions.poll.gpu import GPU_QUERY, parse_reading
from mntui.tui.cli.clustergpus import node_gpus

DATA = Path(__file__).resolve().parents[1] / "data"
SMI = DATA / "nvidia-smi"
H100X8 = SMI / "h100x8.gpu.csv"


def recorded(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(True) if not line.startswith("#"))


@pytest.fixture
def fake_smi(monkeypatch: pytest.MonkeyPatch) -> str:
    """The fake nodes' replaying nvidia-smi, first on PATH, replaying an 8x H100."""
    monkeypatch.setenv("PATH", f"{DATA / 'fakebin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPU", str(H100X8))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_APPS", str(SMI / "small6g.apps.csv"))
    return str(DATA / "fakebin" / "nvidia-smi")


def script(tmp_path: Path, body: str) -> str:
    """An nvidia-smi of our own that writes its PID first (to check it was killed)."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/bin/sh\necho $$ >{tmp_path / 'pid'}\n{body}\n")
    path.chmod(0o755)
    return str(path)


def its_pid(tmp_path: Path) -> int:
    return int((tmp_path / "pid").read_text())


def test_the_queries_are_the_pollers_and_the_reading_parses_as_a_polls(fake_smi: str) -> None:
    assert " ".join(["nvidia-smi", *gpuwire.GPU_ARGS]) == GPU_QUERY  # one definition
    reader = gpus.Reader()
    reading = reader.read(fake_smi)
    assert reading is not None and reading.csv == recorded(H100X8)
    parsed = parse_reading(reading.csv, reading.apps, frozenset({1580}))
    assert [g.index for g in parsed.gpus] == list(range(8)) and parsed.errors == ()
    assert [(a.pid, a.own) for a in parsed.apps] == [(1580, True), (1597, False)]


def test_a_hung_nvidia_smi_is_killed_at_its_budget_and_the_sampling_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = script(tmp_path, "echo 'index, uuid'\nexec sleep 60")
    t0 = time.monotonic()
    text, stuck = gpus.run([smi], budget=0.5)
    assert time.monotonic() - t0 < 3 and stuck is None
    assert text == "index, uuid\nmntui: nvidia-smi did not answer within 0.5 s: killed\n"
    assert not alive([its_pid(tmp_path)]), "the hung nvidia-smi must be killed"
    # on the reader's thread: `latest` answers at once while nvidia-smi hangs
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin{os.pathsep}/bin")
    reader = gpus.Reader(every=0.1, budget=1.0)
    reader.start()
    try:
        t0 = time.monotonic()
        assert reader.latest() is None and time.monotonic() - t0 < 0.1
        wait_for(lambda: reader.latest() is not None, 10, what="the reading after its budget")
        latest = reader.latest()
        assert latest is not None and latest.csv is not None
        errors = parse_reading(latest.csv, latest.apps).errors
        assert errors == ("mntui: nvidia-smi did not answer within 1 s: killed",)
    finally:
        reader.stop()
        wait_for(lambda: not alive([its_pid(tmp_path)]), 10, what="the last one killed")


def test_garbage_is_valid_text_without_controls_and_parses_to_errors(tmp_path: Path) -> None:
    smi = script(tmp_path, r"printf 'index, uuid\n0, \377\376\033]52;c;cGF3bmVk\007\033[2J\n'")
    text, _ = gpus.run([smi])
    assert "\x1b" not in text and "\x07" not in text and "\ufffd" in text
    text.encode("utf-8")  # valid
    reading = parse_reading(text, "")
    assert [g.uuid for g in reading.gpus] == ["\ufffd\ufffd"]  # OSC 52 and CSI gone whole


def test_endless_output_is_cut_at_the_limit_on_a_line_and_killed(tmp_path: Path) -> None:
    smi = script(tmp_path, "exec yes '0, GPU-1, NVIDIA H100, 97 %, 1 MiB, 2 MiB, 30, 1 W, 2 W'")
    text, stuck = gpus.run([smi])
    assert stuck is None and not alive([its_pid(tmp_path)])
    assert len(text) <= gpuwire.TEXT_MAX
    *rows, last = text.splitlines()
    assert last == f"mntui: nvidia-smi printed more than {gpuwire.LIMIT} bytes: cut"
    assert all(r.endswith("2 W") for r in rows)  # cut on a line's end


def test_a_failing_nvidia_smi_says_so_among_its_lines(tmp_path: Path) -> None:
    smi = script(
        tmp_path, "echo 'NVIDIA-SMI has failed because it could not talk to the driver'; exit 9"
    )
    text, _ = gpus.run([smi])
    assert parse_reading(text, "").errors == (
        "NVIDIA-SMI has failed because it could not talk to the driver",
        "mntui: nvidia-smi exited 9",
    )


def test_no_nvidia_smi_is_no_gpus_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    reader = gpus.Reader(every=0.05, say=said.append)
    with monkeypatch.context() as m:  # the fixtures' teardown needs tmux on PATH
        m.setenv("PATH", str(tmp_path))
        reader.start()
        wait_for(lambda: reader.latest() is not None, 5, what="the reader's word")
    time.sleep(0.2)  # would it say it again? (a few of its cadences)
    assert said == ["sentinel: no nvidia-smi on this node: no GPUs are read"]
    out = gpus.Outbox(reader).fields((7,), time.monotonic() + 3600)
    assert out["gpu"] == {"csv": None, "apps": "", "own": [7], "age": 0.0}  # does not age


def test_a_reading_goes_out_when_it_or_the_pids_changed_or_after_resend() -> None:
    reader = gpus.Reader()
    box = gpus.Outbox(reader)
    assert box.fields((1,), 0.0) == {}  # nothing read yet
    reader._latest = gpus.Reading("a\n", "", 10.0)
    assert box.fields((2, 1), 10.5)["gpu"] == {"csv": "a\n", "apps": "", "own": [1, 2], "age": 0.5}
    assert box.fields((1, 2), 11.0) == {}
    reader._latest = gpus.Reading("a\n", "", 12.0)  # read again, the same
    assert box.fields((1, 2), 12.5) == {}
    assert box.fields((1, 2, 3), 12.6) != {}  # a new process of the job
    assert box.fields((1, 2, 3), 12.6 + gpus.RESEND) != {}  # a coordinator started again
    reader._latest = gpus.Reading("b\n", "", 30.0)
    assert box.fields((1, 2, 3), 30.1)["gpu"]["csv"] == "b\n"


GOOD_GPU = {"csv": "index\n0\n", "apps": "", "own": [10, 11], "age": 0.2}


@pytest.mark.parametrize(
    "bad",
    [
        [GOOD_GPU],
        {**GOOD_GPU, "csv": 7},
        {**GOOD_GPU, "csv": "x" * (gpuwire.TEXT_MAX + 1)},
        {**GOOD_GPU, "apps": None},
        {**GOOD_GPU, "own": "10"},
        {**GOOD_GPU, "own": [True]},
        {**GOOD_GPU, "own": [0]},
        {**GOOD_GPU, "own": [1] * (gpuwire.MAX_PIDS + 1)},
        {**GOOD_GPU, "age": "0"},
        {**GOOD_GPU, "age": float("nan")},
        {**GOOD_GPU, "age": -1},
        {k: v for k, v in GOOD_GPU.items() if k != "age"},
    ],
)
def test_a_reading_of_another_shape_is_malformed(bad: Any) -> None:
    with pytest.raises(Malformed):
        check(bad, "age")


def test_the_board_keeps_each_nodes_reading_counts_a_bad_one_and_keeps_the_facts(
    tmp_path: Path,
) -> None:
    wc = _cfg()
    board = Board(wc, str(tmp_path / "coord"))
    peer = Peer("n1", _Channel())  # type: ignore[arg-type]
    snap = {"k": "snap", "run": wc.run, "age": 0.1, "facts": GOOD, "steps": {"step": 3}}
    board.heard(peer, {**snap, "gpu": GOOD_GPU})
    board.heard(peer, {**snap, "gpu": {**GOOD_GPU, "csv": ["index"]}})
    board.heard(peer, snap)  # unchanged: the last reading stands
    assert board.malformed == 1 and "n1" in board.words
    board.publish({}, time.monotonic(), force=True)
    data = json.loads((tmp_path / "coord" / gpuwire.BOARD_FILE).read_text())
    entry = data["nodes"]["n1"]
    assert (entry["csv"], entry["own"]) == ("index\n0\n", [10, 11])
    assert abs(entry["read_at"] - (time.time() - 0.2)) < 5
    board.new_attempt(1, "another")
    board.publish({}, time.monotonic(), force=True)
    data = json.loads((tmp_path / "coord" / gpuwire.BOARD_FILE).read_text())
    assert data["nodes"] == {}  # whose processes are the job's is the attempt's


def test_a_board_over_its_bound_keeps_whole_json_and_says_who_was_left_out() -> None:
    small = {"csv": "index\n0\n", "apps": "", "own": [], "read_at": 1.0}
    big = {**small, "csv": "x" * gpuwire.TEXT_MAX}
    nodes = {f"n{i}": big if i % 2 else small for i in range(gpuwire.BOARD_MAX // 8000)}
    board = within_board({"at": 1.0, "nodes": nodes})
    assert len(json.dumps(board)) <= gpuwire.BOARD_MAX
    assert board["nodes"]["n0"] == small
    assert board["nodes"]["n1"]["csv"].startswith("mntui: this node's GPU reading (")
    readings, bad = from_board(board)
    assert bad == 0 and len(readings) == len(nodes)


def _board_text(gpu_json: bytes, now: int = 1000) -> str:
    return board_text({"status.json": {"at": now, "nodes": {}}, "gpus.json": gpu_json}, now=now)


def test_the_manager_reads_the_boards_readings_strictly() -> None:
    good = {"csv": recorded(H100X8), "apps": "", "own": [5], "read_at": 998.0}
    nodes = {"n0": good, "n1": {**good, "own": ["5"]}, "n2": {**good, "csv": None}, "n3": 5}
    view = parse_board(_board_text(json.dumps({"at": 999, "nodes": nodes}).encode()))
    assert sorted(view.gpus) == ["n0", "n2"] and view.gpus_malformed == 2
    assert view.gpus["n0"] == GpuText(good["csv"], "", (5,), 998.0)  # type: ignore[arg-type]
    cut = parse_board(_board_text(json.dumps({"nodes": nodes}).encode()[:100]))
    assert cut.gpus == {} and cut.gpus_malformed == 1 and cut.status is not None
    assert "gpus.json" in board_script(".mntui/runs/j/r/n0", gpus=True)
    assert "gpus.json" not in board_script(".mntui/runs/j/r/n0")  # a launch's wait, a kill's


def test_status_shows_each_nodes_gpus_as_a_polled_run_shows_them() -> None:
    apps = "pid, gpu_uuid, used_gpu_memory [MiB], process_name\n"
    apps += "41, GPU-a, 100 MiB, python\n42, GPU-b, 100 MiB, \x1b]0;evil\x07other\n"
    small = recorded(SMI / "small6g.gpu.csv")
    nodes = {
        "n0": {"csv": recorded(H100X8), "apps": "", "own": [], "read_at": 995.0},
        "n1": {"csv": small, "apps": apps, "own": [41], "read_at": 999.0},
        "n2": {"csv": None, "apps": "", "own": [], "read_at": 999.0},
        "n3": {"csv": recorded(H100X8), "apps": "", "own": [], "read_at": 900.0},  # stale
        "n4": {"csv": "Unable to talk to the driver \x1b[2J\n", "apps": "", "own": [],
               "read_at": 999.0},
    }  # fmt: skip
    view = parse_board(_board_text(json.dumps({"at": 999, "nodes": nodes}).encode()))
    shown = node_gpus(view, ["n0", "n1", "n2", "n3", "n4", "n5"])
    assert re.fullmatch(r"8x 99% 387/637G", shown["n0"].cell), shown["n0"].cell
    assert shown["n1"].cell.endswith(" 1 foreign"), shown["n1"].cell
    assert [a["own"] for a in (shown["n1"].as_json() or {})["apps"]] == [True, False]
    assert "\x1b" not in json.dumps(shown["n1"].as_json())
    assert (shown["n2"].cell, shown["n2"].as_json()) == ("no GPU", None)
    assert (shown["n3"].cell, shown["n5"].cell) == ("-", "-")
    assert shown["n4"].cell == "GPU ERROR: Unable to talk to the driver"
