"""The node package runs on a node's bare `python3 -I -S`, 3.9 or later: it imports only
itself and the standard library, in 3.9's syntax, and its zipapp (launch/sentinelship.py)
is a pure function of its sources that runs there. No 3.9 interpreter can be installed
here, so the floor is held by vermin plus the one pitfall vermin cannot see (a `|` of
types evaluated at run time), and the archive runs under the system's python3."""

from __future__ import annotations

import ast
import builtins
import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mntui.sessions.launch import sentinelship

REPO = Path(__file__).resolve().parents[2]
NODE = REPO / "sessions" / "node"
MODULES = sorted(p for p in NODE.rglob("*.py") if "__pycache__" not in p.parts)
SYSTEM_PYTHON = "/usr/bin/python3"  # not the venv's: no site-packages of ours behind it
_TYPES = {n for n, v in vars(builtins).items() if isinstance(v, type)} | {"None"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_imports_only_itself_and_the_standard_library(path: Path) -> None:
    wrong = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        wrong += [
            f"l.{node.lineno} {n}"
            for n in names
            if n.split(".")[0] not in sys.stdlib_module_names
            and n != "__future__"
            and not (n + ".").startswith("mntui.sessions.node.")  # itself, by its roles
        ]
    assert not wrong, f"{path.name}: not the standard library nor the node package: {wrong}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_annotations_are_never_evaluated(path: Path) -> None:
    """3.9 cannot evaluate `X | None` in an annotation: every module with code defers them
    (its first statement after the docstring)."""
    body = _tree(path).body
    if body and isinstance(body[0], ast.Expr):
        body = body[1:]
    if not body:
        return  # a docstring alone
    first = body[0]
    assert isinstance(first, ast.ImportFrom) and first.module == "__future__", path.name
    assert "annotations" in {a.name for a in first.names}, path.name


def runtime_type_unions(source: str) -> list[str]:
    """`A | B` of types where it runs (not an annotation): a TypeError on 3.9. A `|` is
    taken for one when a side is None or a builtin type, or inside isinstance/issubclass's
    second argument (`os.O_WRONLY | os.O_APPEND` is an int's)."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        for ann in _annotations(node):
            skip |= {id(n) for n in ast.walk(ann)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Match):
            found.append(f"l.{node.lineno} match")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            sides = [_name(node.left), _name(node.right)]
            if any(s in _TYPES for s in sides):
                found.append(f"l.{node.lineno} {ast.unparse(node)}")
        if isinstance(node, ast.Call) and _name(node.func) in {"isinstance", "issubclass"}:
            kinds = node.args[1:2]
            if any(isinstance(n, ast.BinOp) for k in kinds for n in ast.walk(k)):
                found.append(f"l.{node.lineno} {ast.unparse(node)}")
    return sorted(set(found))


def _annotations(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.arg):
        return [node.annotation] if node.annotation else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.returns] if node.returns else []
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    return node.id if isinstance(node, ast.Name) else None


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("x = int | None", True),
        ("isinstance(v, (A | B))", True),
        ("cast(str | None, v)", True),
        ("match v:\n    case 1:\n        pass", True),
        ("def f(a: int | None = None) -> str | None: ...", False),
        ("x: dict[str, int] | None = None", False),
        ("flags = os.O_WRONLY | os.O_APPEND", False),
        ("isinstance(v, (int, str))", False),
    ],
)
def test_the_union_check_sees_what_vermin_does_not(source: str, bad: bool) -> None:
    assert bool(runtime_type_unions(source)) is bad, runtime_type_unions(source)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_type_union_or_match_at_run_time(path: Path) -> None:
    assert runtime_type_unions(path.read_text()) == [], path.name


def test_python_3_9_is_enough() -> None:
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent))
    if vermin is None:
        pytest.fail("vermin is not installed: `bash .ci/setup --tests` installs it")
    res = subprocess.run(
        [vermin, "-t=3.9-", "--violations", "--no-tips", str(NODE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_bundle_runs_on_bare_python3(tmp_path: Path) -> None:
    b = sentinelship.bundle()
    pyz = tmp_path / f"{b.sha}.pyz"
    pyz.write_bytes(b.data)
    run = [SYSTEM_PYTHON, "-I", "-S", str(pyz)]
    res = subprocess.run([*run, "selftest"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("SELFTEST ok 3."), res
    assert res.stderr == "", res.stderr
    res = subprocess.run([*run, "version"], capture_output=True, text=True, cwd=tmp_path)
    assert res.stdout == f"VERSION {b.sha}\n", res
    res = subprocess.run([*run, "no-such-verb"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1, res


def test_selftest_names_the_module_that_fails(tmp_path: Path) -> None:
    src = tmp_path / "node"
    shutil.copytree(NODE, src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "zz_broken.py").write_text("from __future__ import annotations\nimport yaml\n")
    pyz = tmp_path / "b.pyz"
    pyz.write_bytes(sentinelship.build(src).data)
    res = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-S", str(pyz), "selftest"], capture_output=True, text=True
    )
    assert res.returncode == 1, res
    assert res.stdout.startswith("SELFTEST failed zz_broken: ModuleNotFoundError"), res.stdout


def test_the_bundle_is_a_function_of_its_sources(tmp_path: Path) -> None:
    src = tmp_path / "node"
    shutil.copytree(NODE, src, ignore=shutil.ignore_patterns("__pycache__"))
    first, again = sentinelship.build(src), sentinelship.build(src)
    assert first == again and first.data == again.data
    names = zipfile.ZipFile(io.BytesIO(sentinelship.bundle().data)).namelist()
    assert "mntui/sessions/node/proc/daemon.py" in names and "__main__.py" in names, names
    (src / "__init__.py").touch()  # a new mtime, the same bytes: the same bundle
    assert sentinelship.build(src) == first
    with (src / "daemon.py").open("a") as f:
        f.write("\n# changed\n")
    changed = sentinelship.build(src)
    assert changed.sha != first.sha and len(changed.sha) == 16
    assert changed.digest.startswith(changed.sha)
