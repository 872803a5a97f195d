"""``python -m sessionstate``: the ``sessionstate`` command."""
from __future__ import annotations

import sys

from .clients.cli import main

sys.exit(main())
