"""Notifications: what a notice says (notices.py: the policy, a webhook's body, a
command's environment, webhook URLs kept secret) and its delivery (notifier.py,
webhookpost.py). Imports only the ground: the config reads its policy, the
watchdog and the app send.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .notices import Notice as Notice
    from .notices import NotifyEvent as NotifyEvent
    from .notices import NotifyPolicy as NotifyPolicy
    from .notices import check_webhook_url as check_webhook_url
    from .notifier import Notifier as Notifier
else:
    __getattr__ = lazy_exports(__name__, __file__)
