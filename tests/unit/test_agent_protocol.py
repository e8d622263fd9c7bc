"""The agent's protocol without nodes: the wire codec, framing, the peer-uid check and
the socket's directory (a socketpair stands in for a client)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

import pytest
from recorded import h100_node

from mntui.sessions.agent import Agent
from mntui.sessions.agent import client as agentclient
from mntui.sessions.agent import place as agentplace
from mntui.sessions.events import Event, Phase
from mntui.sessions.poll import NodeState, Verdict
from mntui.sessions.poll.snapshot import JobProc, NodeSnapshot, snapshot_from_wire, snapshot_wire
from mntui.sessions.wire import WireError, decode, encode, message, parse_message, read_messages

HOSTILE = 'evil\n@END\x00\udcff]}{"v":1} \x1b[2J' + "é"


def hostile_snapshot() -> NodeSnapshot:
    proc = JobProc(42, 1, "T", None, 1.5, HOSTILE)
    return NodeSnapshot(
        "node0",
        0,
        1.0,
        True,
        error=HOSTILE,
        rtt=0.01,
        session=True,
        pane_pid=7,
        exit_code=-9,
        procs=(proc,),
        ports=(29500,),
        load=(1.0, 2.0, 3.0),
        new_output=b"\xff\xfe\n@LOG x\n" + bytes(range(256)),
        malformed=3,
    )


def roundtrip(s: NodeSnapshot) -> NodeSnapshot:
    return snapshot_from_wire(json.loads(json.dumps(snapshot_wire(s))))


def test_snapshots_come_back_as_the_same_objects() -> None:
    s = hostile_snapshot()
    assert roundtrip(s) == s
    gpu = h100_node("g1", 1, step=10, frozen=False)[0]
    assert gpu.gpu is not None and gpu.gpu.gpus
    assert roundtrip(gpu) == gpu
    v = Verdict(NodeState.FROZEN, HOSTILE)
    assert decode(Verdict, json.loads(json.dumps(encode(v)))) == v
    e = Event("n", 1, Phase.KILLED, HOSTILE)
    assert decode(Event, json.loads(json.dumps(encode(e)))) == e


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: d.update(extra=1), "unknown field"),
        (lambda d: d.pop("node"), "missing field node"),
        (lambda d: d.update(rank=True), "expected int"),
        (lambda d: d.update(rank="0"), "expected int"),
        (lambda d: d.update(new_output="not base64!"), "not base64"),
        (lambda d: d.update(load=[1.0, 2.0]), "expected 3 items"),
        (lambda d: d["procs"][0].update(pid=None), "expected int"),
        (lambda d: d.update(procs={"0": 1}), "expected a list"),
        (lambda d: d.update(gpu=[]), "expected an object"),
    ],
)
def test_a_snapshot_of_another_shape_is_refused_whole(change, error) -> None:  # type: ignore[no-untyped-def]
    d = json.loads(json.dumps(snapshot_wire(hostile_snapshot())))
    change(d)
    with pytest.raises(WireError, match=error):
        snapshot_from_wire(d)
    with pytest.raises(WireError, match="not a NodeState"):
        decode(Verdict, {"state": "exploded", "why": ""})


def test_framing_is_versioned_and_bounded() -> None:
    assert parse_message(message(op="status")) == {"v": 1, "op": "status"}
    for bad, why in ((b'{"v":2,"op":"x"}', "version"), (b"[1]", "object"), (b"\xff", "JSON")):
        with pytest.raises(WireError, match=why):
            parse_message(bad)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(message(op="one") + b'{"v":1,"op":"two"}\n{"v":1,"op"')
        a.shutdown(socket.SHUT_WR)
        got = read_messages(b)
        assert next(got)["op"] == "one" and next(got)["op"] == "two"
        with pytest.raises(WireError, match="mid-message"):
            next(got)


def serve_pair(agent: Agent) -> socket.socket:
    """A connected client socket whose other end the agent serves."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    threading.Thread(target=agent.serve, args=(theirs,), daemon=True).start()
    ours.settimeout(5)
    return ours


def test_another_users_connection_is_refused() -> None:
    """SO_PEERCRED says who connected; an agent owned by another uid refuses us."""
    assert agentplace.peer_uid(socket.socketpair()[0]) == os.getuid()
    with serve_pair(Agent("job", uid=os.getuid() + 1)) as sock:
        reply = next(read_messages(sock))  # said before any request is read
    assert reply["ok"] is False and "refused: peer uid" in reply["error"]


def test_requests_are_checked_and_answered_in_order() -> None:
    with serve_pair(Agent("job")) as sock:
        for line in (
            message(op="hello"),
            message(op="launch-missiles"),
            message(op="status"),
            message(op="logs", nodes={"n": {"offset": -1}}),
            message(op="kill", nodes="all"),
            message(op="subscribe", back=True),
        ):
            sock.sendall(line)
        sock.sendall(b'{"v":9}\n')
        got = list(read_messages(sock))
    assert got[0]["ok"] and got[0]["pid"] == os.getpid() and got[0]["run_id"] is None
    errors = [m["error"] for m in got[1:]]
    assert "unknown op 'launch-missiles'" in errors[0]
    assert "no run attached" in errors[1]
    assert "offset out of range" in errors[2] and "list of node names" in errors[3]
    assert "back:" in errors[4] and "protocol version 9" in errors[5]


def test_socket_directory_must_be_ours_and_private(tmp_path: Path) -> None:
    d = tmp_path / "sockets"
    agentplace.make_private(d)
    assert d.stat().st_mode & 0o777 == 0o700
    d.chmod(0o755)
    with pytest.raises(agentplace.AgentUnavailable, match="not a private directory"):
        agentplace.check_private(d)
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(agentplace.AgentUnavailable, match="not a private directory"):
        agentplace.check_private(link)


def test_socket_path_fits_sun_path_whatever_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / ("x" * 200)))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    a, b = agentplace.socket_path("job"), agentplace.socket_path("other")
    assert a != b and len(str(a)) < agentplace.SUN_PATH_MAX
    assert a.parent == Path(f"/tmp/mntui-{os.getuid()}")


def test_no_agent_file_means_direct(tmp_path: Path) -> None:
    client, via = agentclient.try_connect(tmp_path)
    assert client is None and via.name == "direct" and "no agent" in via.detail
    (tmp_path / agentplace.AGENT_FILE).write_text('{"socket": 1, "pid": "x"}')
    assert "unreadable" in agentclient.try_connect(tmp_path)[1].detail


# -- the poll script pieces this issue added, under dash and shellcheck ----------------


def test_a_late_viewer_reads_exactly_the_last_bytes_before_the_size(tmp_path: Path) -> None:
    """`status` and the app start near the end of each log: the first poll carries the
    last `keep` bytes (STEP on a one-shot status), and the next one follows from the size."""
    import subprocess

    from mntui.sessions.poll.pollscript import parse_answer, poll_script
    from mntui.sessions.runs import NodeRecord

    run = tmp_path / "run"
    run.mkdir()
    data = bytes(range(256)) * 40 + b"step 7\npartial"
    (run / "output.log").write_bytes(data)
    rec = NodeRecord("n1", "h", 0, "none", "tag/none", "run")
    env = {**os.environ, "HOME": str(tmp_path)}
    for keep, want in ((100, data[-100:]), (0, b""), (10**6, data)):
        script = poll_script(rec, 0, frozenset(), True, gpus=False, ports=False, keep=keep)
        assert subprocess.run(["dash", "-n"], input=script, text=True).returncode == 0
        check = subprocess.run(
            [str(Path(sys.executable).parent / "shellcheck"), "-s", "sh", "-"],
            input=script,
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stdout
        out = subprocess.run(["dash", "-s"], input=script, capture_output=True, text=True, env=env)
        a = parse_answer(out.stdout)
        assert a.log_size == len(data) and a.log == want[-65536:] and a.malformed == 0


def test_the_poll_tree_descends_into_children(tmp_path: Path) -> None:
    """/proc/PID/task/TID/children ends without a newline: `read` sees EOF on it, and
    the old walk in lib.sh (`read ... && ...`) therefore never descended."""
    import subprocess

    from mntui.sessions.poll.pollscript import TREE

    parent = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"])
    try:
        kids: list[str] = []
        for _ in range(100):
            kids = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if len(kids) == 2:
                break
            threading.Event().wait(0.02)
        out = subprocess.run(
            ["dash", "-c", f"{TREE}\nmntui_poll_tree {parent.pid} 999999999"],
            capture_output=True,
            text=True,
        )
        assert sorted(out.stdout.split()) == sorted([str(parent.pid), *kids]), out
    finally:
        for kid in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split():
            os.kill(int(kid), 9)
        parent.kill()
        parent.wait()
