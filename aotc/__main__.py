"""`python -m aotc ...`: the same as the `aotc` command."""

import sys

from .cli import main

sys.exit(main())
