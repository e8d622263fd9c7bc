"""The bundle's verbs: `python3 -I -S <sha>.pyz <verb> ...` on a node.

`selftest` is what `launch` (and the tests) run on a node's own python3 before trusting
it: it imports every module of the package, so a syntax or stdlib name that this python
lacks fails here, in one line, and not in a sentinel at 3 a.m. `version` hashes the
archive it runs from: that is the bundle's name (`<sha>.pyz`), never a baked copy of it
(a hash cannot be written into the bytes it hashes). `run` and `coord` load their module
only when asked, so the other verbs work whatever those modules need. `kill` is the
one kill on a node (killer.py), the manager's too.
"""

from __future__ import annotations

import importlib
import sys

_PACKAGE = __package__ or "mntui.sessions.node"
_VERBS = {
    "run": "sentinel.sentinel",
    "coord": "coord.coordinator",
    "guard": "sentinel.guard",
    "feed": "coord.follower",
    "kill": "proc.killer",
}
USAGE = "usage: python3 -I -S bundle.pyz selftest | version | run|coord|guard|feed|kill ARGS..."


def selftest() -> int:
    import pkgutil  # here: a kill on the node pays for what it imports (killer.py)

    package = importlib.import_module(_PACKAGE)
    found = pkgutil.walk_packages(package.__path__, onerror=lambda name: None)
    names = sorted(m.name for m in found)  # its roles' sub-packages and their modules
    for name in names:
        try:
            importlib.import_module(f"{_PACKAGE}.{name}")
        except Exception as e:  # any failure is the answer, in one line
            print(f"SELFTEST failed {name}: {type(e).__name__}: {e}".replace("\n", " "))
            return 1
    print(f"SELFTEST ok {'.'.join(str(v) for v in sys.version_info[:3])}")
    return 0


def version() -> int:
    import hashlib

    archive = getattr(globals().get("__loader__"), "archive", None)  # a zipimporter: the .pyz
    if not isinstance(archive, str):
        print("VERSION source")
        return 0
    with open(archive, "rb") as f:
        print(f"VERSION {hashlib.sha256(f.read()).hexdigest()[:16]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    verb, rest = (args[0], args[1:]) if args else ("", [])
    if verb == "selftest" and not rest:
        return selftest()
    if verb == "version" and not rest:
        return version()
    if verb in _VERBS:
        module = importlib.import_module(f"{_PACKAGE}.{_VERBS[verb]}")
        code = module.main(rest)
        return code if isinstance(code, int) else 0
    print(f"{verb or 'no verb'}: unknown; {USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
