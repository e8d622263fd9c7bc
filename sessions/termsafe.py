"""Node text made safe for a terminal: the one rule (node/rules/termsafe.py), here for the
manager's modules. It lives in the node package because the coordinator on the main
node cleans the same text with it, and that package imports nothing of ours."""

from __future__ import annotations

from mntui.sessions.node.rules.termsafe import clean, one_line

__all__ = ["clean", "one_line"]
