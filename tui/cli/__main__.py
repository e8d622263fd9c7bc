"""`python -m mntui.tui.cli`: the `mntui` command."""

import sys

from .entry import main

sys.exit(main())
