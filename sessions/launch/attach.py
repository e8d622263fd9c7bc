"""`mntui attach`: hand the terminal to a node's tmux session.

The CLI replaces itself (exec) with the returned argv, so the user's terminal talks
to tmux directly and detaching returns to their shell, not to mntui.
"""

from __future__ import annotations

from dataclasses import replace

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.ssh import ssh_base_argv

from . import tmux


def attach_argv(
    cfg: JobConfig,
    node: str | None = None,
    *,
    inside_tmux: bool | None = None,
    host: str | None = None,
) -> list[str]:
    """`host`: where the run's record says `node` is, when it says (a spare a swap put
    in is one of the config's spares, not of its nodes)."""
    spec = _spec(cfg, node) if node else cfg.main_node
    spec = replace(spec, host=host) if host is not None else spec
    session = tmux.session_name(cfg.job, spec.name)
    inside = tmux.inside_tmux() if inside_tmux is None else inside_tmux
    if spec.is_local:
        return tmux.attach_argv(session, inside_tmux=inside)
    remote_cmd = tmux.remote_attach_command(session)
    return [*ssh_base_argv(cfg.ssh.config), "-t", "--", spec.host, remote_cmd]


def _spec(cfg: JobConfig, node: str) -> NodeSpec:
    """One of the config's nodes, or of its spares; KeyError when neither."""
    for n in (*cfg.nodes, *cfg.spares):
        if n.name == node:
            return n
    raise KeyError(node)


def attach_all_argv(cfg: JobConfig, *, inside_tmux: bool | None = None) -> list[str]:
    """One local session, one tiled pane per node, each attached to that node's session."""
    name = tmux.tiled_session_name(cfg.job)
    panes = [tmux.TiledPane(n.name, attach_argv(cfg, n.name, inside_tmux=False)) for n in cfg.nodes]
    # A local node's pane attaches to the same server: unset TMUX so tmux allows nesting.
    panes = [tmux.TiledPane(p.title, ["env", "-u", "TMUX", *p.argv]) for p in panes]
    tmux.tiled_session(name, panes)
    inside = tmux.inside_tmux() if inside_tmux is None else inside_tmux
    return tmux.attach_argv(name, inside_tmux=inside)
