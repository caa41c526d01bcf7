"""`python -m fairdp_core.cli`: the `fairdp` command."""

import sys

from . import main

sys.exit(main())
