from __future__ import annotations

import json
import subprocess
from pathlib import Path

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch.nodeplan import home_path, render_command
from mntui.sessions.launch.plan import build_plan, describe
from mntui.sessions.node.rules.runid import new_run_id

CFG = """\
job: qwen
nodes: [g369, g375, g380]
main: g375
workdir: "~/my dir"
setup: ["source ~/venv/bin/activate"]
env: {NCCL_DEBUG: WARN}
nproc_per_node: 8
master_port: 29511
command: torchrun --nnodes={nnodes} --node_rank={node_rank} --master_addr={master_addr} --master_port={master_port} --nproc_per_node={nproc_per_node} train.py --tag {node}
overrides:
  g380: {env: {EVIL: "$(rm -rf ~)"}}
"""


def test_plan_orders_main_first_with_ranks_env_and_names() -> None:
    plan = build_plan(parse_config(CFG), "20260101-000000-abcd", "10.0.0.75")
    assert [(n.node, n.rank, n.is_main) for n in plan.nodes] == [
        ("g375", 0, True),
        ("g369", 1, False),
        ("g380", 2, False),
    ]
    assert plan.world_size == 24 and plan.nnodes == 3
    w = plan.node("g369")
    assert w.session == "qwen-g369" and w.tag == "qwen/20260101-000000-abcd/g369"
    assert w.run_dir == ".mntui/runs/qwen/20260101-000000-abcd/g369"
    assert {
        k: w.env[k] for k in ("NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")
    } == {
        "NODE_RANK": "1",
        "NNODES": "3",
        "MASTER_ADDR": "10.0.0.75",
        "MASTER_PORT": "29511",
        "WORLD_SIZE": "24",
    }
    assert w.env["NCCL_DEBUG"] == "WARN" and w.env["PYTHONUNBUFFERED"] == "1"
    assert w.command == (
        "torchrun --nnodes=3 --node_rank=1 --master_addr=10.0.0.75 --master_port=29511 "
        "--nproc_per_node=8 train.py --tag g369"
    )


def test_values_are_quoted_in_scripts() -> None:
    plan = build_plan(parse_config(CFG), "r1", "host with space")
    g380 = plan.node("g380")
    assert "export EVIL='$(rm -rf ~)'" in g380.launch_script
    assert "--master_addr='host with space'" in g380.command
    assert "cd -- \"$HOME\"/'my dir' || exit 97" in g380.launch_script
    # The scripts are valid shell.
    for n in plan.nodes:
        for script in (n.launch_script, n.start_script):
            assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_start_script_tags_the_pane_and_keeps_it() -> None:
    plan = build_plan(parse_config(CFG), "r1", "m")
    s = plan.main.start_script
    assert "exec env MNTUI_RUN=qwen/r1/g375 bash ./launch.sh" in s
    assert "remain-on-exit on" in s and "tmux new-session -d -s qwen-g375" in s
    assert plan.main.launch_script in s


def test_render_and_home_paths() -> None:
    assert render_command("a {node} {node_rank}", {"node": "x;y", "node_rank": 3}) == "a 'x;y' 3"
    assert render_command("{{literal}} {node}", {"node": "n"}) == "{literal} n"
    assert home_path("~") == '"$HOME"' and home_path("/a b") == "'/a b'"
    assert new_run_id(0).startswith("19700101-") or new_run_id(0)[:4] in ("1969", "1970")


def test_dry_run_text_shows_every_node() -> None:
    text = describe(build_plan(parse_config(CFG), "r1", "m"))
    assert (
        "== g375 (host g375, rank 0, main)" in text
        and "== g380 (host g380, rank 2, worker)" in text
    )
    assert "MNTUI_RUN=qwen/r1/g369" in text


def test_session_names_never_collide_across_jobs_or_dotted_nodes() -> None:
    a = build_plan(parse_config("job: a\nnodes: [b-c]\ncommand: x\n"), "r1", "m").main
    b = build_plan(parse_config("job: a-b\nnodes: [c]\ncommand: x\n"), "r1", "m").main
    assert (a.session, b.session) == ("a-b-c", "a+b-c")
    assert "tmux new-session -d -s a+b-c " in b.start_script
    assert "tmux kill-session -t =a+b-c " in b.start_script
    dotted = build_plan(parse_config("job: j\nnodes: [n.0, n_0]\ncommand: x\n"), "r1", "m")
    assert [n.session for n in dotted.nodes] == ["j-n,0", "j-n_0"]
    assert [n.run_dir for n in dotted.nodes] == [".mntui/runs/j/r1/n.0", ".mntui/runs/j/r1/n_0"]
    assert [n.tag for n in dotted.nodes] == ["j/r1/n.0", "j/r1/n_0"]


def test_launch_enters_the_workdir_before_setup(tmp_path: Path) -> None:
    """docs/config.md's order: `cd` to the workdir, then `setup`, so a relative
    `source .venv/bin/activate` is the workdir's venv. launch.sh is run for real, by bash,
    from its run dir (as tmux runs it)."""
    work = tmp_path / "proj dir"
    (work / ".venv" / "bin").mkdir(parents=True)
    (work / ".venv" / "bin" / "activate").write_text("export VENV=activated\n")
    cfg = parse_config(
        f"""
    job: rel
    nodes: [g1]
    workdir: {json.dumps(str(work))}
    setup: [source .venv/bin/activate]
    command: 'echo "venv=$VENV pwd=$PWD"'
    """.replace("\n    ", "\n")
    )
    script = build_plan(cfg, "r1", "m").main.launch_script
    run = tmp_path / "run"
    run.mkdir()
    (run / "launch.sh").write_text(script)
    res = subprocess.run(["bash", "./launch.sh"], cwd=run, capture_output=True, text=True)
    log = (run / "output.log").read_text()
    assert res.returncode == 0 and f"venv=activated pwd={work}" in log, log
    assert (run / "exit_code").read_text() == "0\n"


def test_launch_stops_at_a_missing_workdir_before_setup(tmp_path: Path) -> None:
    """A workdir that is not there ends the job with 97, and `setup` never runs elsewhere."""
    cfg = parse_config(
        f"""
    job: rel
    nodes: [g1]
    workdir: {json.dumps(str(tmp_path / "nope"))}
    setup: ["touch {tmp_path}/setup-ran"]
    command: "true"
    """.replace("\n    ", "\n")
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "launch.sh").write_text(build_plan(cfg, "r1", "m").main.launch_script)
    res = subprocess.run(["bash", "./launch.sh"], cwd=run, capture_output=True, text=True)
    assert res.returncode == 97 and not (tmp_path / "setup-ran").exists()
    assert "No such file or directory" in (run / "output.log").read_text()
