"""The doctor without nodes: its probe's output read strictly, its scripts run for real
under `sh`, its verdicts, and the smoke job's name kept apart from every user job."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.config.jobchecks import JOB_RE
from mntui.sessions.config.jobconfig import JobConfig, parse_config
from mntui.sessions.doctor import probe as doctor
from mntui.sessions.doctor import smoke
from mntui.sessions.doctor.checks import Status, ifname_checks, node_checks, workdir_check
from mntui.sessions.errors import ExitCode
from mntui.sessions.launch import tmux
from mntui.sessions.launch.kill import kill_script, kill_spec
from mntui.sessions.launch.plan import build_plan
from mntui.sessions.launch.sentinelship import bundle
from mntui.sessions.procs import job_node_pattern, run_tag

REPO = Path(__file__).resolve().parents[2]
SHELLCHECK = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or "shellcheck"
TOKEN = "0123456789abcdef"
M = f"@{TOKEN}"
PY = {"python": "3.11.2", "torch": "2.3.0", "cuda": False, "cuda_version": None, "gpus": 0}
# What a `setup` line may print: the old probe's own keys, a process line, a port holder.
NOISE = [
    "@DISK n/a",
    "@GIT x",
    "@PY {",
    "@WORKDIR missing",
    "@SESSION",
    "@TMUX missing",
    "@RESOLVE 10.9.9.9",
    "PROC 1 S L3NiaW4vaW5pdA==",
    "LISTEN 29500 1 cm9vdA== L3NiaW4vaW5pdA==",
    f"{M}x DISK 5",
    "@" + "f" * 16 + " DISK 1",
]


def config(
    job: str = "qwen", env: str = "{}", setup: str = "[]", workdir: str = "null"
) -> JobConfig:
    return parse_config(
        f"job: {job}\nnodes: [n0, n1]\nmaster_port: 29511\nenv: {env}\n"
        f"setup: {setup}\nworkdir: {workdir}\ncommand: sleep 1\n"
    )


def probe_output(*setup_output: str) -> str:
    return "\n".join(
        [
            "PROC 4242 S c2xlZXAgMTIw",  # base64: node text is data
            "LISTEN 29511 4243 YWxpY2U= cHl0aG9uMyAtbSBodHRwLnNlcnZlcg==",
            f"{M} SESSION",
            f"{M} SCANNED",
            f"{M} TMUX tmux 3.3a",
            f"{M} RESOLVE 10.0.0.1",
            f"{M} ADDRS 10.0.0.1 127.0.0.1 ",
            f"{M} IF lo unknown",
            f"{M} IF ib0 up",
            *setup_output,
            f"{M} WORKDIR ok /home/u/my work",
            f"{M} DISK 104857600",
            f"{M} GIT {'a' * 40}    3",
            f"{M} PY {json.dumps(PY)}",
        ]
    )


def test_probe_reads_only_this_runs_lines_in_their_shape() -> None:
    p = doctor.parse_probe(probe_output(*NOISE), TOKEN)
    assert (p.tmux, p.session, p.resolved, p.addrs) == (
        "tmux 3.3a",
        True,
        "10.0.0.1",
        ("10.0.0.1", "127.0.0.1"),
    )
    assert dict(p.ifaces) == {"lo": "unknown", "ib0": "up"}
    assert (p.workdir, p.workdir_missing, p.disk_kib) == ("/home/u/my work", False, 104857600)
    assert p.git is not None and (p.git.commit, p.git.dirty) == ("a" * 40, 3)
    assert p.python is not None and (p.python.version, p.python.torch) == ("3.11.2", "2.3.0")
    # Process and port lines count only before `setup` runs: PROC 1 / LISTEN ... 1 do not.
    assert p.procs == 1 and p.holders == (
        "port 29511 held by pid 4243 (alice): python3 -m http.server",
    )
    assert p.malformed == 0
    rows = node_checks("n0", p, config().node("n0"), config())
    assert [(r.check, r.status) for r in rows] == [
        ("tmux", Status.PASS),
        ("workdir", Status.PASS),
        ("sentinel", Status.FAIL),  # the default watch is the cluster's; no SENTPY line here
        ("torch", Status.PASS),
        ("stacks", Status.WARN),  # no py-spy line in this probe
        ("git", Status.WARN),
    ]


def test_marked_lines_of_the_wrong_shape_are_skipped_and_counted() -> None:
    bad = [f"{M} DISK n/a", f"{M} GIT x", f"{M} PY {{", f"{M} RESOLVE not-an-ip", f"{M} BOGUS 1"]
    out = probe_output() + "\n" + "\n".join(bad) + f"\n{M} DISK 7\n"
    p = doctor.parse_probe(out, TOKEN)
    assert p.malformed == 4  # `PY {` is an answer from python3, just not a readable one
    assert p.disk_kib == 7  # the last value in shape wins
    assert p.git is not None and p.resolved == "10.0.0.1"
    assert p.python is None and p.python_raw
    assert doctor.parse_probe("", TOKEN) == doctor.Probe()


def test_probe_without_workdir_line_says_setup_stopped_it() -> None:
    p = doctor.parse_probe(f"{M} SCANNED\n{M} TMUX tmux 3.4\n", TOKEN)
    row = workdir_check("n0", p, config().node("n0"))
    assert row.status is Status.FAIL and "did not get past `setup`" in row.detail


def _run_probe(cfg: JobConfig, cwd: Path) -> doctor.Probe:
    script = doctor.probe_script(cfg, cfg.node("n0"), "127.0.0.1", True, TOKEN)
    res = subprocess.run(
        ["sh", "-s"], input=script, capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert res.returncode == 0, res.stderr
    return doctor.parse_probe(res.stdout, TOKEN)


def test_probe_runs_under_sh_and_no_config_value_runs(tmp_path: Path) -> None:
    """Hostile values in every place a config value reaches the probe, run for real."""
    evil = "$(touch pwned)`touch pwned`'\"; touch pwned"
    work = tmp_path / f"work {evil}"
    work.mkdir()
    fake_python = f"python3() {{ printf '%s\\n' {json.dumps(json.dumps(PY))}; }}"
    cfg = config(
        env=json.dumps({"NCCL_SOCKET_IFNAME": f"ib0{evil}", "GLOO_SOCKET_IFNAME": "^lo"}),
        setup=json.dumps([*[f"echo {json.dumps(x)}" for x in NOISE], fake_python]),
        workdir=json.dumps(str(work)),
    )
    p = _run_probe(cfg, tmp_path)
    assert not list(tmp_path.rglob("pwned"))
    assert p.workdir == str(work) and p.python is not None and p.malformed == 0
    assert p.procs == 0 and p.tmux is not None and p.resolved == "127.0.0.1"
    rows = ifname_checks("n0", p, cfg.node("n0"))
    assert rows[0].status is Status.FAIL
    assert f"no interface matches {'ib0' + evil!r}" in rows[0].detail


def test_probe_script_is_checked_shell(tmp_path: Path) -> None:
    cfg = config(
        env=json.dumps({"NCCL_SOCKET_IFNAME": "ib0$(x)\"'"}),
        setup=json.dumps(["echo 'hi'"]),
        workdir=json.dumps("~/a b/$(c)"),
    )
    for is_main in (True, False):
        script = doctor.probe_script(cfg, cfg.node("n0"), "host $(x)", is_main, TOKEN)
        assert "$(x)" not in script.replace("'host $(x)'", "")
        assert subprocess.run(["dash", "-n"], input=script, text=True).returncode == 0
        res = subprocess.run(
            [SHELLCHECK, "-s", "sh", "-S", "warning", "-e", "SC2046,SC2086,SC3067", "-"],
            input=script,
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stdout


def test_exit_code_is_the_shared_exit_code() -> None:
    rows = [doctor.Check("n", "x", Status.PASS, "")]
    assert doctor.exit_code(rows) is ExitCode.OK
    rows.append(doctor.Check("n", "y", Status.WARN, ""))
    assert doctor.exit_code(rows) is ExitCode.DOCTOR_WARN
    rows.append(doctor.Check("n", "z", Status.FAIL, ""))
    assert doctor.exit_code(rows) is ExitCode.DOCTOR_FAIL


@pytest.mark.parametrize("job", ["x", "x-smoke", "a" * 64, "a" * 58 + "-smoke"])
def test_smoke_job_is_no_user_job(job: str) -> None:
    """No user job (JOB_RE) can share the smoke job's name, tags, sessions or run dirs;
    and the name works through the plan, the tag grep and the kill script."""
    cfg = config(job=job)
    s = smoke.smoke_config(cfg, 60, TOKEN)
    assert not JOB_RE.match(s.job)
    users = {job, f"{job}-smoke", f"{job}-smoke"[:64], s.job[1:], s.job.lstrip("_")}
    for user in filter(JOB_RE.match, users):
        for node in ("n0", "n1"):
            assert not re.fullmatch(job_node_pattern(user, node), run_tag(s.job, "r1", node))
            assert not re.fullmatch(job_node_pattern(s.job, node), run_tag(user, "r1", node))
            assert tmux.session_name(s.job, node) != tmux.session_name(user, node)
    plan = build_plan(s, "20260101-000000-abcd", "127.0.0.1")
    for np in plan.nodes:
        assert np.run_dir == f".mntui/runs/{s.job}/20260101-000000-abcd/{np.node}"
        entry = f"MNTUI_RUN={np.tag}\0".encode()
        grep = ["grep", "-zxE", "--", job_node_pattern(s.job, np.node)]
        assert subprocess.run(grep, input=entry, capture_output=True).returncode == 0
        kill = kill_script(kill_spec(s.job, np.node, [29511], 1.0), bundle())
        for script in (np.start_script, kill):
            assert subprocess.run(["dash", "-n"], input=script, text=True).returncode == 0
        assert subprocess.run(["bash", "-n"], input=np.launch_script, text=True).returncode == 0
        assert f" 60 {TOKEN}" in np.command


def test_smoke_results_need_this_runs_marker() -> None:
    ok = {"ok": True, "rank": 1, "world": 4, "backend": "gloo", "sum": 6.0, "expected": 6.0}
    ok |= {"latency_us": 41.7, "algbw_gbps": 0.5}
    line = f"MNTUI_SMOKE {TOKEN} {json.dumps(ok)}"
    r = smoke.parse_smoke_line(line, TOKEN)
    assert r is not None and r.ok
    assert r.detail == "rank 1/4 gloo: sum 6.0 (expected 6.0), latency 42 us, algbw 0.500 GB/s"
    assert smoke.parse_smoke_line(f"MNTUI_SMOKE {json.dumps(ok)}", TOKEN) is None  # forged
    assert smoke.parse_smoke_line(line, "f" * 16) is None
    bad = smoke.parse_smoke_line(f"MNTUI_SMOKE {TOKEN} {{", TOKEN)
    assert bad is not None and not bad.ok and bad.detail.startswith("unreadable result")
    odd = smoke.parse_smoke_line(f"MNTUI_SMOKE {TOKEN} " + json.dumps(ok | {"sum": "6"}), TOKEN)
    assert odd is not None and not odd.ok


def test_doctor_functions_are_small() -> None:
    """Issue 9: one function per concern, none over ~60 lines."""
    long = []
    for name in ("probe.py", "checks.py", "smoke.py"):
        path = REPO / "sessions" / "doctor" / name
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > 60:
                    long.append(f"{name}:{node.name} {size} lines")
    assert not long


def test_stacks_check_reads_py_spy_and_ptrace_scope(tmp_path: Path) -> None:
    """The failure report's hung stacks need py-spy after `setup` and Yama's permission."""
    from mntui.sessions.doctor.checks import stacks_check

    def probe(line: str) -> doctor.Probe:
        return doctor.parse_probe(probe_output(f"{M} PYSPY {line}"), TOKEN)

    ok = probe("1000 0 /opt/venv/bin/py-spy")
    assert ok.pyspy == "/opt/venv/bin/py-spy" and ok.ptrace_scope == 0 and not ok.root
    assert stacks_check("n0", ok).status is Status.PASS
    assert stacks_check("n0", probe("1000 0 ")).status is Status.WARN  # not found
    blocked = stacks_check("n0", probe("1000 1 /usr/bin/py-spy"))
    assert blocked.status is Status.WARN and "ptrace_scope is 1" in blocked.detail
    assert stacks_check("n0", probe("0 1 /usr/bin/py-spy")).status is Status.PASS  # root
    assert stacks_check("n0", probe("0 - /usr/bin/py-spy")).status is Status.PASS  # no Yama
    bad = probe("1000 7 $(reboot)")
    assert bad.malformed == 1 and bad.pyspy is None
    real = _run_probe(config(setup=json.dumps([f"PATH={Path(sys.executable).parent}:$PATH"])),
                      tmp_path)  # fmt: skip
    assert real.pyspy is not None and real.pyspy.endswith("/py-spy")


def test_summary_counts_every_status_zero_included() -> None:
    """Issue 29: the last line gives the counts, so a WARN among 30 rows is not missed."""
    from mntui.sessions.doctor.summary import summary_line

    rows = [doctor.Check(n, c, Status.PASS, "") for n in ("n0", "n1") for c in ("ssh", "tmux")]
    rows += [doctor.Check("n0", "git", Status.WARN, "", "commit")]
    rows += [
        doctor.Check("n1", "clock", Status.WARN, ""),
        doctor.Check("n1", "tcp", Status.FAIL, ""),
    ]
    assert summary_line(rows, 2) == "doctor: 2 nodes, 4 PASS, 2 WARN, 1 FAIL"
    assert summary_line(rows[:1], 1) == "doctor: 1 node, 1 PASS, 0 WARN, 0 FAIL"
    assert summary_line([], 3) == "doctor: 3 nodes, 0 PASS, 0 WARN, 0 FAIL"


def _check_names() -> set[str]:
    """Every check name a doctor row can carry: the second argument, a literal, of each
    Check(...) and verdict(...) in the doctor and its CLI view."""
    names: set[str] = set()
    paths = [*(REPO / "sessions" / "doctor").glob("*.py"), REPO / "tui" / "cli" / "doctor_view.py"]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            func = node.func.id if isinstance(node.func, ast.Name) else None
            arg = node.args[1]
            if func in ("Check", "verdict", "_skipped") and isinstance(arg, ast.Constant):
                names.add(str(arg.value))
    return names


def test_verbose_says_how_every_check_was_made() -> None:
    """`doctor -v` (issue 29) says what ran for each check shown: a check added without
    its line in summary.HOW fails here, naming it."""
    from mntui.sessions.doctor.summary import HOW, how_lines

    names = _check_names()
    assert {"ssh", "tmux", "torch", "ports", "tcp", "allreduce", "pairs", "setup"} <= names
    assert not names - set(HOW), (
        f"checks without a line in doctor/summary.py HOW: {names - set(HOW)}"
    )
    rows = [
        doctor.Check("n0", "tmux", Status.PASS, ""),
        doctor.Check("n1", "tmux", Status.PASS, ""),
    ]
    rows.append(doctor.Check("n0", "master_addr", Status.FAIL, "", "fix DNS"))
    lines = how_lines(rows)
    assert lines[0] == "how each check was made:" and len(lines) == 3  # one line a check
    assert lines[1].startswith("  tmux         `tmux -V`") and "getent ahostsv4" in lines[2]


def test_doctor_takes_v_and_verbose() -> None:
    """A new user types `mntui doctor -v` for more; it was refused (exit 2)."""
    from mntui.tui.cli.args import build_parser

    ap = build_parser()
    assert ap.parse_args(["doctor", "-v"]).verbose is True
    assert ap.parse_args(["doctor", "--verbose", "--json"]).verbose is True
    assert ap.parse_args(["doctor"]).verbose is False
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "doctor", "-v", "--help"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "-v, --verbose" in res.stdout and "how each" in " ".join(res.stdout.split())
