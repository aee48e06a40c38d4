"""`python -m cockpit`: the same as the `cockpit` command."""

import sys

from cockpit.cli.entry import main

sys.exit(main())
