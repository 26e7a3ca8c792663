"""`python -m nudgeability.cli ...`: the `nudge` command without its console script."""

import sys

from nudgeability.cli import main

sys.exit(main())
