"""The one kill on a node (sessions/node/proc/killer.py) on real processes: called as the
sentinel calls it, and as the manager runs it (`kill_script` run by `sh -s`: the bundle
shipped, its `kill` verb on the node's python3) on an identical set of processes."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fakecluster import environ_of, free_port, wait_for

from mntui.sessions.launch.kill import kill_script, kill_spec, parse_kill
from mntui.sessions.launch.sentinelship import bundle
from mntui.sessions.node.proc import members
from mntui.sessions.node.proc.killer import KillResult, Target, kill, listening_ports
from mntui.sessions.procs import job_node_pattern


def kill_by(pattern: str, **kw: object) -> KillResult:
    """A kill of the processes whose tag matches `pattern` (and of what descends from them)."""
    ports = tuple(kw.pop("ports", ()))  # type: ignore[call-overload]
    session = kw.pop("session", None)
    target = Target(job=pattern, session=session, ports=ports)  # type: ignore[arg-type]
    return kill(target, **kw)  # type: ignore[arg-type]


# One process of a set: `stubborn` ignores SIGTERM, `stopped` stops itself, `double`
# double-forks into its own session, `listen` holds a port. Each says it is ready.
CHILD = r"""
import os, signal, socket, sys, time
kind = sys.argv[1]
if kind == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if kind == "listen":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[2])))
    s.listen()
if kind == "double":
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
with open(os.environ["READY"], "a") as f:
    f.write(f"{kind} {os.getpid()}\n")
if kind == "stopped":
    os.kill(os.getpid(), signal.SIGSTOP)
while True:
    time.sleep(1)
"""
KINDS = ("stubborn", "stubborn", "stopped", "double", "listen")


def state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b") ") + 2 :].split()[0].decode()


def alive(pid: int) -> bool:
    return state(pid) not in (None, "Z", "X")


@dataclass
class ProcSet:
    tag: str
    pattern: str
    port: int
    kinds: dict[int, str] = field(default_factory=dict)  # pid -> kind
    strays: dict[str, int] = field(default_factory=dict)  # not to be killed: name -> pid

    def kind(self, pid: int) -> str:
        return self.kinds.get(pid, f"unknown {pid}")


def spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)


@contextmanager
def proc_set(tmp: Path) -> Iterator[ProcSet]:
    """A tagged bash with the CHILD kinds under it, an untagged process and two with tags
    the pattern must not take. Everything left is killed at the end, by PID."""
    job = f"kt{secrets.token_hex(6)}"
    ps = ProcSet(f"{job}/r1/n1", job_node_pattern(job, "n1"), free_port())
    ready = tmp / f"{job}.ready"
    base = {k: v for k, v in os.environ.items() if not k.startswith("MNTUI_")}
    base |= {"CHILD": CHILD, "READY": str(ready)}
    py = f'"{sys.executable}" -c "$CHILD"'
    body = " & ".join(f"{py} {k} {ps.port}" for k in KINDS) + " & wait"
    popens = [spawn(["bash", "-c", body], {**base, "MNTUI_RUN": ps.tag})]
    ps.kinds[popens[0].pid] = "bash"
    strays = {"untagged": None, "other-node": f"{job}/r1/n10", "other-job": f"{job}x/r1/n1"}
    for name, tag in strays.items():
        env = {**base, **({"MNTUI_RUN": tag} if tag else {}), "READY": str(tmp / f"{job}.{name}")}
        popens.append(spawn([sys.executable, "-c", CHILD, "stubborn"], env))
        ps.strays[name] = popens[-1].pid
    try:
        wait_for(lambda: ready.exists() and len(ready.read_text().splitlines()) == len(KINDS), 20)
        for line in ready.read_text().splitlines():
            kind, number = line.split()
            ps.kinds[int(number)] = kind
        wait_for(lambda: all(state(p) == "T" for p, k in ps.kinds.items() if k == "stopped"), 10)
        wait_for(lambda: ps.port in listening_ports(), 10, what="the listener")
        yield ps
    finally:
        for pid in [*ps.kinds, *ps.strays.values()]:
            if alive(pid) and any(job.encode() in e for e in environ_of(pid)):  # not reused
                os.kill(pid, signal.SIGKILL)
        for p in popens:
            p.kill()
            p.wait()


def check_killed(ps: ProcSet, r: KillResult) -> None:
    found = sorted(ps.kind(pid) for pid, _, _ in r.found)
    assert found == sorted(["bash", *KINDS]), r
    assert sorted(ps.kind(pid) for pid in r.sigkilled) == ["stubborn", "stubborn"], r
    assert r.left == () and r.port_holders == (), r
    wait_for(lambda: not any(alive(p) for p in ps.kinds), 5, what="the tagged processes gone")
    assert ps.port not in listening_ports()
    for name, pid in ps.strays.items():
        assert alive(pid), f"{name} was killed"


def test_the_kill_takes_the_tagged_and_nothing_else(tmp_path: Path) -> None:
    with proc_set(tmp_path) as ps:
        r = kill_by(ps.pattern, grace=1.0, ports=[ps.port])
        check_killed(ps, r)
        states = {ps.kind(pid): st for pid, st, _ in r.found}
        assert states["stopped"] == "T"
        assert all("stubborn" in cmd for pid, _, cmd in r.found if ps.kind(pid) == "stubborn")
        assert r.seconds >= 1.0  # the stubborn ones had their grace
        assert json.loads(json.dumps(r.as_dict()))["sigkilled"] == list(r.sigkilled)


def test_known_pids_are_told_first_and_checked_like_any_other(tmp_path: Path) -> None:
    """The sentinel hands over the PIDs it follows with their start times; a pid whose
    process is not that one (another started since) is never signalled for being named,
    and every member is still found by the scan."""
    with proc_set(tmp_path) as ps:
        bash = next(p for p, k in ps.kinds.items() if k == "bash")
        known = [(bash, start(bash)), *((p, start(p) + 1) for p in ps.strays.values())]
        r = kill_by(ps.pattern, grace=1.0, ports=[ps.port], known=known)
        check_killed(ps, r)
        assert [name for name, _ in r.phases] == ["scan", "stop", "settle", "session"]


def start(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b") ") + 2 :].split()[19])


def test_literal_head_is_what_every_match_starts_with() -> None:
    from mntui.sessions.node.proc.proctree import literal_head

    assert literal_head(job_node_pattern("my-job.x", "n1")).startswith(b"MNTUI_RUN=my")
    assert literal_head("MNTUI_RUN=job/[^/]+/n1") == b"MNTUI_RUN=job/"
    assert literal_head("ab*c") == b"a"  # the b is optional
    assert literal_head("a|b") == b""  # an alternative need not start so
    assert literal_head("ab(c|d)") == b"ab"
    assert literal_head("ab[|]") == b"ab"
    assert literal_head("(x)") == b""


def node_kill(ps: ProcSet, home: Path) -> KillResult:
    """The manager's kill as a node runs it (sh reading it on stdin, the bundle shipped to
    `home`), its answer read back by the manager's parser."""
    spec = kill_spec(ps.tag.split("/")[0], "n1", [ps.port], 1.0)
    spec["session"] = None
    out = subprocess.run(
        ["sh", "-s"],
        input=kill_script(spec, bundle(), ship=True),
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        timeout=60,
    ).stdout
    r = parse_kill("n1", out, [ps.port])
    assert r.malformed == 0, out
    found = tuple((p.pid, p.state, p.cmdline) for p in r.found)
    holders = tuple(h.port for h in r.port_holders)
    return KillResult(found, r.sigkilled, r.left, r.session_killed, holders, r.seconds)


def test_the_managers_kill_is_the_nodes_kill(tmp_path: Path) -> None:
    """Two identical sets of processes, one killed as the manager kills (the bundle's
    `kill` verb over `sh`), one as a sentinel does: the same processes found (in the
    same states), the same needing SIGKILL, the same survivors."""

    def seen(ps: ProcSet, r: KillResult) -> tuple[list[tuple[str, bool]], list[str], int, int]:
        found = sorted((ps.kind(pid), st == "T") for pid, st, _ in r.found)
        killed = sorted(ps.kind(pid) for pid in r.sigkilled)
        return found, killed, len(r.left), len(r.port_holders)

    with proc_set(tmp_path) as ps:
        managers = seen(ps, r := node_kill(ps, tmp_path))
        check_killed(ps, r)
    with proc_set(tmp_path) as ps:
        here = seen(ps, r := kill_by(ps.pattern, grace=1.0, ports=[ps.port]))
        check_killed(ps, r)
    assert here == managers
    assert managers[0] == sorted([("bash", False), *((k, k == "stopped") for k in KINDS)])


def test_the_caller_its_ancestors_and_exclude_are_spared(tmp_path: Path) -> None:
    """The sentinel carries a tag the kill pattern takes, and so may its parent."""
    with proc_set(tmp_path) as ps:
        env = {**os.environ, "MNTUI_RUN": ps.tag, "READY": str(tmp_path / "spared")}
        spared = spawn([sys.executable, "-c", CHILD, "plain"], env)
        wait_for((tmp_path / "spared").exists, 20, what="the spared process")
        killer = (
            "import json, sys; from mntui.sessions.node.proc.killer import Target, kill; "
            "r = kill(Target(sys.argv[1]), grace=1.0, exclude=[int(sys.argv[2])]); "
            "print(json.dumps(r.as_dict()), flush=True)"
        )
        # `; true`: bash stays the killer's (tagged) parent instead of exec'ing it.
        script = f'"{sys.executable}" -c "$KILLER" "$1" "$2"; echo "bash $$"; true'
        try:
            done = subprocess.run(
                ["bash", "-c", script, "bash", ps.pattern, str(spared.pid)],
                env={**env, "KILLER": killer},
                capture_output=True,
                text=True,
                timeout=60,
            )
            lines = done.stdout.splitlines()
            r, bash_pid = json.loads(lines[0]), int(lines[1].split()[1])
            found = {pid for pid, _, _ in r["found"]}
            assert bash_pid not in found and spared.pid not in found and r["left"] == [], r
            assert sorted(ps.kind(pid) for pid in found) == sorted(["bash", *KINDS])
            assert alive(spared.pid)
        finally:
            spared.kill()
            spared.wait()


def test_the_tmux_session_is_closed(tmp_path: Path) -> None:
    job = f"kt{secrets.token_hex(6)}"
    tag, sock, session = f"{job}/r1/n1", f"killer{secrets.token_hex(4)}", f"{job}-n1"
    ready = tmp_path / "ready"
    pane = shlex.join(
        ["env", f"MNTUI_RUN={tag}", f"READY={ready}", sys.executable, "-c", CHILD, "stubborn"]
    )
    tmux = ("tmux", "-L", sock)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNTUI_")}
    # As launch starts a node's session: the pane stays after its process died.
    start = [*tmux, "new-session", "-d", "-s", session, pane, ";"]
    start += ["set-option", "-t", f"={session}:", "remain-on-exit", "on"]
    subprocess.run(start, env=env, check=True)
    server = int(
        subprocess.run(
            [*tmux, "display-message", "-p", "#{pid}"], capture_output=True, text=True, env=env
        ).stdout
    )
    try:
        wait_for(ready.exists, 20, what="the pane's process")
        pid = int(ready.read_text().split()[1])
        r = kill_by(job_node_pattern(job, "n1"), grace=0.3, session=session, tmux=tmux)
        assert r.session_killed and [p for p, _, _ in r.found] == [pid] and r.left == (), r
        assert r.sigkilled == (pid,)
        has = subprocess.run([*tmux, "has-session", "-t", f"={session}"], capture_output=True)
        assert has.returncode != 0
        wait_for(lambda: not alive(pid), 5, what="the pane's process gone")
        again = kill_by(job_node_pattern(job, "n1"), grace=0.3, session=session, tmux=tmux)
        assert not again.session_killed and again.found == ()
    finally:
        if alive(server) and b"tmux" in Path(f"/proc/{server}/cmdline").read_bytes():
            os.kill(server, signal.SIGKILL)


FAKE_PID = 5_000_000  # above any pid_max (2^22): a fake /proc's PIDs reach no process


def fake_proc(root: Path, environs: dict[int, bytes]) -> Path:
    for pid, environ in environs.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_bytes(
            f"{pid} (x) y) S 1 ".encode() + b" ".join([b"0"] * 17) + b" 77 0 0\n"
        )
        (root / str(pid) / "environ").write_bytes(environ)
        (root / str(pid) / "cmdline").write_bytes(b"fake\0x\x1b[2J\xff" + b"y" * 400)
    return root


def test_an_environment_cut_short_never_matches_by_a_piece(tmp_path: Path) -> None:
    """An environment past 256 KiB is read cut: its last, partial entry is dropped, so
    `MNTUI_RUN=j/r/n10`, cut after `n1`, is never taken for node n1's tag."""
    pad = b"A=" + b"a" * (256 * 1024 - 40) + b"\0"
    tag = b"MNTUI_RUN=kj/r1/n1"
    proc = fake_proc(
        tmp_path,
        {
            FAKE_PID: b"X=1\0" + tag + b"\0" + pad,  # the tag before the cut: found
            FAKE_PID + 1: pad + tag + b"0" * 100 + b"\0",  # cut after "n1": not found
            FAKE_PID + 2: pad + b"B=" + b"b" * 100 + b"\0" + tag + b"\0",  # past the cut
            FAKE_PID + 3: b"MNTUI_RUN=kj/r1/n10\0" + b"X" + tag + b"\0",  # no whole entry
        },
    )
    r = kill_by(job_node_pattern("kj", "n1"), grace=0, proc=str(proc))
    assert [(p, st) for p, st, _ in r.found] == [(FAKE_PID, "S")], r
    assert len(r.found[0][2].encode()) <= 300 + 2 and r.found[0][2].startswith(
        "fake x\x1b[2J\ufffd"
    )
    assert r.left == (FAKE_PID,)  # a fake process never goes


def test_listening_ports_reads_listen_rows_only(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    (tmp_path / "net" / "tcp").write_text(
        head
        + "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000\n"
        + "   1: 0100007F:1F91 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000\n"
        + "garbage\n   2: 0100007F:ZZZZ 00000000:0000 0A\n"
    )
    (tmp_path / "net" / "tcp6").write_text(
        head
        + "   0: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A\n"
    )
    assert listening_ports(str(tmp_path)) == {8080, 80}


def test_what_a_sentinel_saw_is_killed_and_a_pid_taken_since_is_not(tmp_path: Path) -> None:
    """A run dir's `members` file (node/proc/members.py): a process it names by pid and start
    time is the job's whatever it carries (the manager's kill, the sentinel gone); a pid
    it names with another start time is another process now, never killed."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MNTUI_")}
    seen = spawn([sys.executable, "-c", "import time; time.sleep(60)"], base)
    other = spawn([sys.executable, "-c", "import time; time.sleep(60)"], base)
    run = tmp_path / ".mntui" / "runs" / "km" / "r1" / "n1"
    run.mkdir(parents=True)
    try:
        wait_for(lambda: alive(seen.pid) and alive(other.pid), 10, what="both sleeping")
        members.write_members(str(run), [(seen.pid, start(seen.pid)), (other.pid, 1)])
        target = Target(job="MNTUI_RUN=km/[^/]+/n1", runs=(str(tmp_path / ".mntui/runs/km/*/n1"),))
        r = kill(target, grace=1.0)
        assert [pid for pid, _, _ in r.found] == [seen.pid] and r.left == (), r
        wait_for(lambda: seen.poll() is not None, 5, what="the member seen before gone")
        assert other.poll() is None
    finally:
        for p in (seen, other):
            p.kill()
            p.wait()
