from __future__ import annotations

import ast
import json
import re
import subprocess
import time
from dataclasses import fields
from enum import StrEnum
from pathlib import Path

import pytest

from mntui.sessions.config import ConfigError
from mntui.sessions.config.checks import check_seconds
from mntui.sessions.config.jobconfig import load_config, parse_config
from mntui.sessions.config.settings import (
    HostKeyPolicy,
    KillPolicy,
    LaunchPolicy,
    ReadyMode,
    SshPolicy,
    WatchPolicy,
)
from mntui.sessions.launch.nodeplan import render_command

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
job: qwen
nodes: "g[369-370],g375"
main: g370
command: torchrun --node_rank={node_rank} --nnodes={nnodes} x.py
"""


def test_node_set_expands_and_main_gets_rank_0() -> None:
    cfg = parse_config(GOOD)
    assert [(n.name, n.rank) for n in cfg.nodes] == [("g370", 0), ("g369", 1), ("g375", 2)]
    assert cfg.main == "g370" and cfg.master_port == 29500 and cfg.nproc_per_node == 1
    assert cfg.launch.ready is ReadyMode.PORT and cfg.grace == 5.0
    assert all(n.host == n.name for n in cfg.nodes)


def test_mappings_overrides_and_env_merge() -> None:
    cfg = parse_config(
        """\
job: j
nodes:
  - a
  - {name: b, host: b.example.org, env: {X: "2"}, setup: "source b"}
env: {X: "1", Y: 3}
setup: [source venv]
workdir: ~/w
command: run {node}
overrides:
  a: {command: "other {node_rank}", workdir: /abs}
ports: [29501, 29500]
ssh: {host_key: accept-new, config: sub/ssh_config}
""",
        "/etc/cfg/job.yaml",
    )
    a, b = cfg.nodes
    assert a.command == "other {node_rank}" and a.workdir == "/abs" and a.setup == ("source venv",)
    assert dict(a.env) == {"X": "1", "Y": "3"}
    assert (
        b.host == "b.example.org"
        and dict(b.env) == {"X": "2", "Y": "3"}
        and b.setup == ("source b",)
    )
    assert b.workdir == "~/w" and b.command == "run {node}"
    assert cfg.all_ports == (29500, 29501)
    assert (
        cfg.ssh.host_key is HostKeyPolicy.ACCEPT_NEW and cfg.ssh.config == "/etc/cfg/sub/ssh_config"
    )


@pytest.mark.parametrize(
    "text, line, keypath, message",
    [
        (
            "job: j\nnodes: [a]\ncommand: x\nnodess: 1\n",
            4,
            "nodess",
            "unknown key (did you mean 'nodes'?)",
        ),
        ("job: j\nnodes: [a]\n", 1, "", "missing required key 'command'"),
        (
            "job: j\nnodes: [a, {name: b, env: [1]}]\ncommand: x\n",
            2,
            "nodes[1].env",
            "expected a mapping, got a list",
        ),
        (
            "job: j\nnodes:\n  - a\n  - name: b\n    env: 5\ncommand: x\n",
            5,
            "nodes[1].env",
            "expected a mapping",
        ),
        ("job: j\nnodes: [a, a]\ncommand: x\n", 2, "nodes[1]", "duplicate node 'a'"),
        ("job: j\nnodes: ['g[1-3]', g2]\ncommand: x\n", 2, "nodes[1]", "duplicate node 'g2'"),
        (
            "job: j\nnodes: [a]\ncommand: x\noverrides:\n  zz: {env: {A: b}}\n",
            5,
            "overrides.zz",
            "unknown node 'zz'",
        ),
        ("job: j\nnodes: [a]\ncommand: run {rank}\n", 3, "command", "unknown placeholder {rank}"),
        ("job: j\nnodes: [a]\ncommand: 'run {node:>5}'\n", 3, "command", "takes no format spec"),
        ("job: j\nnodes: [a]\ncommand: 'run {'\n", 3, "command", "bad template"),
        (
            "job: j\nnodes: [a]\ncommand: x\nmaster_port: 70000\n",
            4,
            "master_port",
            "expected a port number",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nmaster_port: '29500'\n",
            4,
            "master_port",
            "expected a port number",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nnproc_per_node: 0\n",
            4,
            "nproc_per_node",
            "expected an integer >= 1",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nenv: {1BAD: x}\n",
            4,
            "env.1BAD",
            "not a valid environment variable",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nenv: {MASTER_PORT: 1}\n",
            4,
            "env.MASTER_PORT",
            "set by mntui itself",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nenv: {A: [1]}\n",
            4,
            "env.A",
            "expected a string or number",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nlaunch: {ready: soon}\n",
            4,
            "launch.ready",
            "expected one of port, log, delay",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nlaunch: {ready: log}\n",
            4,
            "launch.ready_pattern",
            "required when ready is 'log'",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nlaunch: {ready: log, ready_pattern: '('}\n",
            4,
            "launch.ready_pattern",
            "bad regular expression",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nkill: {grace: -1}\n",
            4,
            "kill.grace",
            "expected a number >= 0",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nssh: {host_key: yolo}\n",
            4,
            "ssh.host_key",
            "expected one of strict, accept-new",
        ),
        ("job: 'bad job'\nnodes: [a]\ncommand: x\n", 1, "job", "use letters, digits"),
        ("job: j\nnodes: ['g[1-']\ncommand: x\n", 2, "nodes[0]", "bad node set"),
        ("job: j\nnodes: ['a;rm']\ncommand: x\n", 2, "nodes[0]", "bad node name"),
        ("job: j\nnodes: []\ncommand: x\n", 2, "nodes", "non-empty list"),
        ("job: j\nnodes: [a]\nmain: b\ncommand: x\n", 3, "main", "unknown node 'b'"),
        ("job: j\njob: k\nnodes: [a]\ncommand: x\n", 2, "job", "duplicate key"),
        ("job: j\nnodes: [a\ncommand: x\n", 3, "", "invalid YAML"),
        ("- just\n- a list\n", 1, "", "expected a mapping, got a list"),
        ("job: j\nnodes: [a]\ncommand: x\nports: 29501\n", 4, "ports", "expected a list"),
        ("job: j\nnodes: [{host: h}]\ncommand: x\n", 2, "nodes[0]", "needs a 'name'"),
    ],
)
def test_errors_name_file_line_and_key(
    text: str, line: int | None, keypath: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "configs/x.yaml")
    err = info.value
    assert (err.file, err.line, err.keypath) == ("configs/x.yaml", line, keypath), str(err)
    assert message in err.message
    where = f"configs/x.yaml:{line}" if line else "configs/x.yaml"
    assert str(err).startswith(f"{where} {keypath}:" if keypath else f"{where}:")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_cli_config_error_exits_2(tmp_path: Path) -> None:
    from mntui.tui.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("job: j\nnodes:\n  - name: b\n    env: [1]\ncommand: x\n")
    assert main(["-c", str(bad), "kill"]) == 2


@pytest.mark.parametrize("name", ["example.yaml", "demo.yaml"])
def test_shipped_configs_are_valid(name: str) -> None:
    cfg = load_config(REPO / "configs" / name)
    assert cfg.nodes and cfg.nodes[0].rank == 0


# ---- settings declared once (issue 9.5) ---------------------------------------------

SECTIONS = {"launch": LaunchPolicy, "kill": KillPolicy, "ssh": SshPolicy, "watch": WatchPolicy}
MINIMAL = "job: j\nnodes: [a]\ncommand: x\n"


def test_absent_settings_take_the_dataclass_defaults() -> None:
    cfg = parse_config(MINIMAL)
    for key, cls in SECTIONS.items():
        assert getattr(cfg, key) == cls(), key
    assert cfg.grace == KillPolicy().grace == 5.0
    node = cfg.nodes[0]
    assert (node.env, node.setup, node.workdir, node.host) == ({}, (), None, "a")


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_field_of_a_section_is_a_key_and_nothing_else(section: str) -> None:
    cls = SECTIONS[section]
    given = {
        "ready_pattern": "log",
        "config": "sub/x",
        "host_key": "strict",
        "slow_fraction": 0.25,
        "password": "prompt",
    }
    for f in fields(cls):
        value = f.default
        value = list(type(value))[-1].value if isinstance(value, StrEnum) else given.get(f.name, 7)
        cfg = parse_config(MINIMAL + f"{section}: {{{f.name}: {value}}}\n")
        got = getattr(getattr(cfg, section), f.name)
        assert got == value or str(got).endswith(str(value)), (section, f.name, got)
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config(MINIMAL + f"{section}: {{nope: 1}}\n")


def test_no_function_of_the_loader_passes_60_lines() -> None:
    loader = ("jobconfig.py", "checks.py", "jobchecks.py", "settings.py", "nodes.py")
    for name in (*loader, "yamlmarks.py"):
        tree = ast.parse((REPO / "sessions" / "config" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                size = (node.end_lineno or 0) - node.lineno + 1
                assert size <= 60, f"{name}: {node.name} is {size} lines"


# ---- numbers (issue 10.4) ------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, message",
    [
        ("kill: {grace: .inf}", "expected a number >= 0 and <= 3600"),
        ("kill: {grace: .nan}", "got float nan"),
        ("kill: {grace: 3601}", "<= 3600"),
        ("kill: {grace: '5'}", "got str '5'"),
        ("watch: {frozen_after: .nan}", "expected a number >= 0"),
        ("watch: {stall_after: .nan}", "expected a number > 0"),
        ("watch: {stall_after: 0}", "expected a number > 0"),
        ("watch: {unreachable_after: -.inf}", "expected a number >= 0"),
        ("watch: {interval: 0}", "expected a number > 0"),
        ("ssh: {command_timeout: 0}", "expected a number > 0 and <= 86400"),
        ("ssh: {connect_timeout: 1.0e+5}", "<= 3600"),
        ("launch: {ready_timeout: 0}", "expected a number > 0"),
        ("launch: {ready_delay: 86401}", "<= 86400"),
        ("launch: {stagger: .inf}", "<= 3600"),
        ("nproc_per_node: 100000", "expected an integer >= 1 and <= 1024"),
    ],
)
def test_numbers_are_finite_bounded_and_positive_where_needed(setting: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL + setting + "\n", "c.yaml")
    m = re.match(r"(\w+): (?:\{(\w+):)?", setting)
    assert m is not None
    key = m[1] + (f".{m[2]}" if m[2] else "")
    assert str(info.value).startswith(f"c.yaml:4 {key}: "), str(info.value)
    assert message in info.value.message


def test_check_seconds_is_the_same_rule_for_the_command_line() -> None:
    assert check_seconds("2.5", "--grace", positive=False, maximum=3600) == 2.5
    assert check_seconds(0, "--grace", positive=False, maximum=3600) == 0.0
    for bad in ("nan", "inf", "-100", "abc", float("nan"), 3601, True):
        with pytest.raises(ValueError, match=r"^--grace: expected a number >= 0 and <= 3600"):
            check_seconds(bad, "--grace", positive=False, maximum=3600)
    with pytest.raises(ValueError, match="> 0"):
        check_seconds(0, "--timeout", positive=True, maximum=86400)


# ---- the loader never shows a traceback (issue 10.5) ---------------------------------


@pytest.mark.parametrize(
    "text, line, keypath, message",
    [
        ('job: j\nnodes: ""\ncommand: x\n', 2, "nodes", "names no node"),
        ("job: j\nnodes: &a [*a]\ncommand: x\n", 2, "nodes[0]", "a cycle"),
        ("job: j\nnodes: [a]\ncommand: x\nenv: &e {<<: *e}\n", 4, "env", "a cycle"),
        ("job: j\nnodes: [a]\ncommand: x\nenv: {A: \x07}\n", 4, "", "control character 0x07"),
        (
            "job: j\nnodes: [a]\ncommand: !!python/object/apply:os.system [true]\n",
            3,
            "command",
            "tag !!python/object/apply:os.system is not allowed",
        ),
        (
            "job: j\nnodes: [a]\ncommand: x\nenv: !!python/object:os.system {A: 1}\n",
            4,
            "env",
            "is not allowed",
        ),
        ("job: j\nnodes: [a]\ncommand: !!binary eA==\n", 3, "command", "tag !!binary"),
        (
            "job: j\nnodes: [a]\ncommand: x\nenv: {<<: 5}\n",
            4,
            "env",
            "a merge (<<) takes a mapping",
        ),
        ("job: j\nnodes: 'g[1-200]n[1-200]'\ncommand: x\n", 2, "nodes", "more than 4096 nodes"),
        ("job: j\nnodes: 'g[1-100000000]'\ncommand: x\n", 2, "nodes", "more than 4096 nodes"),
        ("job: j\nnodes: 'g[1-99999999999999999999]'\ncommand: x\n", 2, "nodes", "more than 4096"),
        ("job: j\nnodes: ['g[1-4000]', 'h[1-97]']\ncommand: x\n", 2, "nodes[1]", "more than 4096"),
        (
            "job: j\nnodes: [a]\ncommand: x\nnproc_per_node: 1" + "0" * 5000 + "\n",
            4,
            "nproc_per_node",
            "cannot read",
        ),
        ("job: j\nnodes: [a]\ncommand: x\nenv: {A: 1, A: 2}\n", 4, "env.A", "duplicate key"),
        ('job: j\nnodes: [a]\ncommand: "a\\x1bb"\n', 3, "command", "control character 0x1b"),
        (
            "job: j\nnodes: [a]\ncommand: x\nkill: " + "[" * 200 + "]" * 200 + "\n",
            4,
            "kill" + "[0]" * 32,
            "nested more than 32",
        ),
    ],
)
def test_hostile_yaml_is_one_config_error(text: str, line: int, keypath: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    err = info.value
    assert (err.line, err.keypath) == (line, keypath), str(err)
    assert message in err.message, str(err)


def test_deep_nesting_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_config(MINIMAL + "kill: " + "[" * 5000 + "]" * 5000 + "\n")


def test_an_alias_bomb_is_refused_quickly() -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    text = "job: j\nnodes: [a]\ncommand: x\nx:\n" + "".join(f"  {lv}\n" for lv in levels)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="aliases expand to more than 100000 values"):
        parse_config(text)
    assert time.monotonic() - t0 < 3.0  # 0.16 s here; without the cap, 9**9 values


def test_files_that_are_not_a_config_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"job: j\nnodes: [a]\ncommand: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:3: not valid UTF-8 \(byte 0xe9\)"):
        load_config(bad)
    bad.write_bytes(b"# " + b"x" * (1 << 20) + b"\njob: j\n")
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        load_config(bad)


@pytest.mark.parametrize(
    "body",
    ["nodes: &a [*a]", 'nodes: ""', "nodes: [a]\nenv: !!python/name:os.system x", "nodes: [\x01]"],
)
def test_cli_exits_2_on_hostile_yaml(tmp_path: Path, body: str) -> None:
    from mntui.tui.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(f"job: j\ncommand: x\n{body}\n")
    assert main(["-c", str(bad), "kill"]) == 2


def test_yaml_merge_keys_work_and_own_keys_win() -> None:
    cfg = parse_config(
        "job: j\ncommand: x\nnodes: [a, b]\n"
        "env: &base {A: '1', B: '1'}\n"
        "overrides:\n  b: {env: {<<: *base, A: '2', C: '3'}}\n"
    )
    assert dict(cfg.node("b").env) == {"A": "2", "B": "1", "C": "3"}


def test_env_values_reach_the_job_as_written() -> None:
    cfg = parse_config(
        MINIMAL
        + "env:\n  OMP_NUM_THREADS: 010\n  ON: 1\n  T: 1:30\n  V: 2.10\n  Y: yes\n"
        + "  H: 0x1F\n  Q: '007'\n  E: 1e3\n  D: 2001-12-14\n"
    )
    assert dict(cfg.nodes[0].env) == {
        "OMP_NUM_THREADS": "010",
        "ON": "1",
        "T": "1:30",
        "V": "2.10",
        "Y": "yes",
        "H": "0x1F",
        "Q": "007",
        "E": "1e3",
        "D": "2001-12-14",
    }
    with pytest.raises(ConfigError, match="expected a string or number, got nothing"):
        parse_config(MINIMAL + "env: {A: }\n")


# ---- ready_pattern runs with grep -E (issue 10.6) -------------------------------------


@pytest.mark.parametrize(
    "pattern, message",
    [
        (r"step \d+", r"\d is not portable grep -E syntax: write [0-9]"),
        (r"\w+ loss", "write [[:alnum:]_]"),
        (r"\s*done", "write [[:space:]]"),
        (r"\bready\b", r"\b is not portable"),
        (r"step [\d]+", "a backslash inside [...] is literal"),
        ("(?:a|b)", "(?...) is Python syntax"),
        ("a.+?b", "+? (lazy) is Python syntax"),
        ("x{2,1}", "Invalid content of"),
        ("[[:nope:]]", "Invalid character class name"),
        ("+a", "+ at start of expression"),
    ],
)
def test_ready_pattern_is_checked_by_the_engine_that_runs_it(pattern: str, message: str) -> None:
    text = MINIMAL + f"launch: {{ready: log, ready_pattern: {json.dumps(pattern)}}}\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    assert str(info.value).startswith("c.yaml:4 launch.ready_pattern: bad regular expression")
    assert message in info.value.message


GOOD_PATTERNS = [r"step [0-9]+", "^node=", "a|b", "x{2,3}", "[0-9]+ it/s", r"loss=[0-9.]+"]
GOOD_PATTERNS += [r"\(rank [0-9]\)", r"\[rank1\]", "[]a]", "[^]a]b", r"100\%"[:-2] + "%"]


def test_accepted_patterns_match_in_grep_as_in_python() -> None:
    lines = ["step 12", "node=g1", "b", "xxx", "42 it/s", "loss=0.5", "(rank 3)"]
    lines += ["[rank1] hello", "]", "zb", "100%", "nothing here"]
    for pattern in GOOD_PATTERNS:
        parse_config(MINIMAL + f"launch: {{ready: log, ready_pattern: {json.dumps(pattern)}}}\n")
        for line in lines:
            res = subprocess.run(["grep", "-qE", "--", pattern], input=line + "\n", text=True)
            assert (res.returncode == 0) == bool(re.search(pattern, line)), (pattern, line)


# ---- placeholders in quotes, ~user (issue 10.7) ----------------------------------------


@pytest.mark.parametrize(
    "command, where",
    [
        ('run --addr="{master_addr}"', "double"),
        ("run --name='{master_addr}'", "single"),
        ("run $'{master_addr}'", "$'...'"),
        ('echo "$(date) {master_addr}"', "double"),
        ('echo "it\'s {master_addr}"', "double"),
        ('echo "$(echo "{master_addr}")"', "double"),
    ],
)
def test_master_addr_inside_quotes_is_refused(command: str, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(f"job: j\nnodes: [a]\ncommand: {json.dumps(command)}\n", "c.yaml")
    assert str(info.value).startswith("c.yaml:3 command: placeholder {")
    assert f"inside {where} quotes" in info.value.message


QUOTE_SAFE = [
    "run --addr={master_addr} --tag {node}",
    "echo \"node {node} rank {node_rank}\" '{node}' {master_addr}",
    'echo "$(echo {master_addr})"',
    'echo "rank {node_rank} of {nnodes}" {node}',
    "echo \"$(printf %s {master_addr})\" '$x' {node}",
    "echo \\\"{master_addr} \\'{node}",
    "echo \"it's\" '\"' {master_addr}",
    "# it's a comment\nrun {master_addr}",
    "echo $((1 + {node_rank})) {node}",
]


@pytest.mark.parametrize("command", QUOTE_SAFE)
def test_placeholders_outside_quotes_reach_the_shell_as_one_literal_word(
    command: str, tmp_path: Path
) -> None:
    cfg = parse_config(f"job: j\nnodes: [a]\ncommand: {json.dumps(command)}\n")
    pwned = tmp_path / "pwned"
    addr = f"$(touch {pwned})`touch {pwned}`'\"x y"
    rendered = render_command(
        cfg.nodes[0].command, {"master_addr": addr, "node": "a", "node_rank": 1, "nnodes": 2}
    )
    res = subprocess.run(
        ["sh", "-c", rendered.replace("run ", "printf '<%s>' ")], capture_output=True, text=True
    )
    assert not pwned.exists(), rendered
    if command.startswith("run"):
        assert f"<--addr={addr}>" in res.stdout


@pytest.mark.parametrize(
    "setting",
    [
        "workdir: ~bob/src",
        "workdir: '~bob'",
        "nodes: [{name: a, workdir: ~root/x}]",
        "overrides: {a: {workdir: ~x/}}",
    ],
)
def test_tilde_user_workdir_is_refused(setting: str) -> None:
    text = f"job: j\ncommand: x\n{setting}\n" + ("nodes: [a]\n" if "nodes" not in setting else "")
    with pytest.raises(ConfigError, match=r"workdir: ~\w+ is not expanded \(only ~ and ~/ are\)"):
        parse_config(text)


def test_home_relative_workdirs_are_kept() -> None:
    for workdir in ("'~'", "~/src", "/abs", "rel/dir"):
        got = parse_config(MINIMAL + f"workdir: {workdir}\n").nodes[0].workdir
        assert got == workdir.strip("'")


# ---- restarts, spares, notifications, progress (issues 11, 12) -------------------------


def test_restart_notify_progress_and_spares_are_read_and_checked() -> None:
    from mntui.sessions.notify import NotifyEvent

    cfg = parse_config(
        "job: j\nnodes: [a, b]\ncommand: x\nenv: {E: '1'}\n"
        "restart: {max: 3, backoff: 5, on: [failed, frozen], exit_codes: [3], not_on: [2]}\n"
        "spares: [s1, {name: s2, host: h2}]\n"
        "notify: {webhook: 'http://127.0.0.1:9/hook', command: 'echo hi', on: [teardown]}\n"
        "progress_pattern: 'iteration (?P<step>[0-9]+)'\n"
    )
    r = cfg.restart
    assert (r.max, r.backoff, r.on, r.exit_codes, r.not_on) == (
        3, 5.0, frozenset({"failed", "frozen"}), frozenset({3}), frozenset({2})
    )  # fmt: skip
    assert [(s.name, s.host, s.rank, dict(s.env)) for s in cfg.spares] == [
        ("s1", "s1", -1, {"E": "1"}),
        ("s2", "h2", -1, {"E": "1"}),
    ]
    assert cfg.notify.webhook == "http://127.0.0.1:9/hook" and cfg.notify.command == "echo hi"
    assert cfg.notify.on == frozenset({NotifyEvent.TEARDOWN})
    assert cfg.progress_pattern == "iteration (?P<step>[0-9]+)"
    assert parse_config(MINIMAL).restart.max == 0 and parse_config(MINIMAL).spares == ()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("restart: {max: -1}", "restart.max: expected an integer >= 0 and <= 1000"),
        ("restart: {on: [crashed]}", "restart.on[0]: expected one of failed, orphaned"),
        ("restart: {exit_codes: [0]}", "restart.exit_codes: 0 is a clean exit"),
        ("restart: {backoff: .nan}", "restart.backoff: expected a number >= 0"),
        ("spares: [a]", "spares[0]: 'a' is a node of the job already"),
        ("notify: {webhook: 'file:///etc/passwd'}", "notify.webhook: only http:// and https://"),
        ("notify: {on: [boom]}", "notify.on[0]: expected one of teardown"),
        ("progress_pattern: 'step [0-9]+'", "progress_pattern: "),
        ("watch: {slow_fraction: 2}", "watch.slow_fraction: expected a fraction > 0 and <= 1"),
    ],
)
def test_restart_notify_progress_mistakes_name_their_key(body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(MINIMAL.replace("[a]", "[a, b]") + body + "\n")
