"""One example per verb, shown at the end of its --help (and `mntui --help`'s first steps).

A verb's flags say what it can do; the example says what people type. Kept apart from
the grammar (args.py) so every verb's one line can be read and checked together: a verb
without one fails tests/unit/test_cli_help.py.
"""

from __future__ import annotations

# How to load `mntui completion`'s script in each shell; docs/cli.md shows the same lines.
INSTALL = {
    "bash": 'eval "$(mntui completion bash)"          # in ~/.bashrc',
    "zsh": 'eval "$(mntui completion zsh)"           # in ~/.zshrc, after compinit',
    "fish": "mntui completion fish > ~/.config/fish/completions/mntui.fish",
}

EXAMPLES = {
    "init": "mntui init g369 g375 -- torchrun train.py --lr 3e-4   # ./mntui.yaml for 2 nodes",
    "launch": "mntui launch --no-ui      # start, print each node's progress, return",
    "kill": "mntui kill                # every process of the job on every node, nothing else",
    "cleanup": "mntui cleanup -y          # free the job's ports without asking",
    "attach": "mntui attach g375         # its tmux session (Ctrl-b d to detach)",
    "status": "mntui status --watch      # every node's state, GPUs, step and rate, refreshed",
    "logs": "mntui logs -f -n 20 g375  # its last 20 lines, then new ones until Ctrl+C",
    "report": "mntui report              # which rank broke first, and why",
    "doctor": "mntui doctor --allreduce  # every check on every node, then a real all-reduce",
    "nodes": "mntui nodes --json        # the nodes, ranks and nproc a launch would use",
    "demo": "mntui demo --seconds 20   # the bundled 2-node CPU job: launch, watch, kill",
    "history": "mntui history --since 7d  # per restart chain: time trained, time lost",
    "quarantine": 'mntui quarantine g380 --for 24h --why "ECC errors"   # out of launches',
    "completion": " ".join(INSTALL["zsh"].split()),  # docs/cli.md gives the same three lines
}
FIRST_STEPS = "mntui init g369 g375 -- torchrun train.py && mntui doctor && mntui launch"


def epilog(verb: str | None) -> str:
    """`example:` and the line; a verb without one gets none (the test names it)."""
    line = FIRST_STEPS if verb is None else EXAMPLES.get(verb)
    return f"example:\n  {line}" if line else ""
