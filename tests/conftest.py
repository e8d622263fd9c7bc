from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# The Ctrl+C tests send SIGINT to an `mntui` they start. A suite started with SIGINT
# ignored (`nohup ... &`, a non-interactive shell's background job) would pass that on
# through exec and the CLI would never see its Ctrl+C; handled here, the children start
# with the default action instead.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Run records and local tmux servers of tests never touch the user's own."""
    base = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "xdg"))
    (base / "tmux").mkdir(mode=0o700)
    monkeypatch.setenv("TMUX_TMPDIR", str(base / "tmux"))
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)
    yield
    # The test's own local tmux server (watchdogs, local nodes, tiled views) goes with it.
    subprocess.run(["tmux", "kill-server"], capture_output=True, env={**os.environ})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`integration` = needs real sshd nodes, tmux or torch: every test under
    tests/integration and every test that asks for the fake cluster, so that
    `pytest -m "not integration"` is the fast inner loop."""
    for item in items:
        uses_nodes = "fake" in getattr(item, "fixturenames", ())
        if uses_nodes or "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
