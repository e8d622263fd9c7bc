"""bench/screenshots.py makes the docs' screenshots from the app itself (not by hand):
it runs, and what it saves shows the app with progress."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_docs_screenshots_are_made_by_the_app(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    import screenshots

    assert screenshots.main([str(tmp_path)]) == 0
    grid = (tmp_path / "app.svg").read_text()
    for text in ("step&#160;1211&#160;@1.9/s", "SLOW", "progress:", "g381"):
        assert text in grid, text
    assert "1187&#160;@0.6/s" in (tmp_path / "table.svg").read_text()
    for name in screenshots.SHOTS:  # the committed ones exist (README shows app.svg)
        assert (REPO / "docs" / "img" / name).is_file()
