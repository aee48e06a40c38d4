"""`python -m cockpit`: the same as the `cockpit` command."""

import sys

try:
    from cockpit.cli import main
except KeyboardInterrupt:  # ctrl+c before the command is even loaded: quiet, as after
    print("cockpit: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
