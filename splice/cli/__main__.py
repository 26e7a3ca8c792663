"""`python -m nudgeability.splice.cli ...`: the `nudge` command without its console script."""

import sys

from nudgeability.splice.cli import main

sys.exit(main())
