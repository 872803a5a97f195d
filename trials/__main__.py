"""``python -m trials`` (``./dev trials``): see ``trials.runner``."""

import sys

from .runner import main

sys.exit(main())
