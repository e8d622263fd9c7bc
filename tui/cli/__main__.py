"""`python -m mntui.tui.cli`: the `mntui` command."""

import sys

from . import main  # the installed `mntui`'s door (a head start, a clean Ctrl+C)

sys.exit(main())
