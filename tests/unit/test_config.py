from __future__ import annotations

from pathlib import Path

import pytest

from mntui.sessions.config import ConfigError, HostKeyPolicy, ReadyMode, load_config, parse_config

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
