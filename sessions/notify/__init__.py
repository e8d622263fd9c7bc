"""Notifications: what a notice says (notices.py: the policy, a command's environment;
the words and a webhook's body are node/rules/notifytext.py's, which the cluster's
coordinator sends with too) and its delivery (notifier.py, webhookpost.py). Imports
only the ground: the config reads its policy, watch/clusternotify.py sends what the
coordinator could not.
"""

from typing import TYPE_CHECKING

from mntui.sessions.exports import lazy_exports

if TYPE_CHECKING:
    from .notices import Notice as Notice
    from .notices import NotifyEvent as NotifyEvent
    from .notices import NotifyPolicy as NotifyPolicy
    from .notices import check_webhook_url as check_webhook_url
    from .notices import failed_summary as failed_summary
    from .notices import finished_summary as finished_summary
    from .notices import for_coordinator as for_coordinator
    from .notices import gave_up_summary as gave_up_summary
    from .notices import restart_summary as restart_summary
    from .notices import teardown_summary as teardown_summary
    from .notifier import Notifier as Notifier
else:
    __getattr__ = lazy_exports(__name__, __file__)
