"""One webhook POST within a deadline: the rule lives in the node package
(node/rules/webhookpost.py), where the coordinator on the main node posts with it too."""

from __future__ import annotations

from mntui.sessions.node.rules.webhookpost import post_once

__all__ = ["post_once"]
