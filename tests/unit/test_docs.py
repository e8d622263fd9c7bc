"""The docs name every config key and every verb: a key or a verb added without a line
in docs/ fails here, naming it. The README is the newcomer's page and links the rest."""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from pathlib import Path

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.config import checks as ck
from mntui.sessions.config.jobconfig import TOP_KEYS
from mntui.sessions.config.nodesource import NodeSource
from mntui.tui.cli.args import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
YAML_NAMES = {"hold": "for"}  # fields whose YAML key is a Python keyword


def docs_text() -> str:
    return "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md")))


def sections(cls: type, prefix: str = "") -> dict[str, type]:
    """Every dataclass a config key leads to, by its dotted key: `watch`, `sync.git`."""
    out: dict[str, type] = {}
    for name, hint in typing.get_type_hints(cls, localns={"NodeSource": NodeSource}).items():
        for t in (hint, *typing.get_args(hint)):
            keyed = name in ck.keys(cls) or not ck.keys(cls)  # not ck-read: every field
            if isinstance(t, type) and dataclasses.is_dataclass(t) and t is not NodeSpec and keyed:
                out[f"{prefix}{name}"] = t
                out.update(sections(t, f"{prefix}{name}."))
    return out


def config_keys() -> set[str]:
    """The top-level keys, a node's keys, and every section's keys as `section.key`."""
    keys = set(TOP_KEYS) | (ck.keys(NodeSpec) - {"rank"})
    for key, cls in sections(JobConfig).items():
        fields = ck.keys(cls) or {f.name for f in dataclasses.fields(cls)}  # read by hand
        keys |= {f"{key}.{YAML_NAMES.get(name, name)}" for name in fields}
    return keys


def test_every_config_key_is_documented() -> None:
    keys = config_keys()
    assert {"watch.stall_after", "restart.max", "sync.git.checkout", "notify.webhook"} <= keys
    assert {"nodes", "host", "restart.quarantine_after.for"} <= keys
    text = docs_text()
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, f"config keys docs/ does not name (as `key`): {missing}"


def test_every_verb_is_documented() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = docs_text()
    missing = [v for v in sub.choices if not re.search(rf"`mntui {v}\b", text)]
    assert not missing, f"verbs docs/ does not show (as `mntui VERB...`): {missing}"


def test_the_readme_is_short_and_links_every_page() -> None:
    readme = (REPO / "README.md").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert len(pages) >= 10
    unlinked = [p for p in pages if f"docs/{p}" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
    assert len(readme) < 15_000, "the README is the newcomer's page: the rest goes in docs/"
    assert "docs/img/app.svg" in readme  # a screenshot of the app, made by the app


def test_completion_help_and_docs_give_the_same_install_lines() -> None:
    """`completion --help` once said "zsh: the same" as bash while docs/cli.md said
    `completion zsh` after compinit (issue 29): both now read examples.INSTALL."""
    from mntui.tui.cli.examples import EXAMPLES, INSTALL

    cli = " ".join((DOCS / "cli.md").read_text().split())
    for shell, line in INSTALL.items():
        assert " ".join(line.split()) in cli, f"docs/cli.md lacks the {shell} line: {line}"
    assert EXAMPLES["completion"] == " ".join(INSTALL["zsh"].split())


def test_the_readme_numbers_its_first_steps_in_order() -> None:
    """The five-minute block once numbered its steps 1, 2, 3, 5 (issue 29)."""
    readme = (REPO / "README.md").read_text()
    block = readme[readme.index("mntui init g369") :]
    block = block[: block.index("```")]
    assert re.findall(r"\b(\d)\. ", block) == ["1", "2", "3", "4", "5"]
