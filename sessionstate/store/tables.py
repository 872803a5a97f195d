"""Imports every module that declares SQLModel tables, so ``create_all`` sees them all.

A feature that needs its own tables declares them in its own module under ``store/`` and adds
one import here.
"""

from . import schema  # noqa: F401  the core tables
from . import upstream_links  # noqa: F401  adopted sessions: upstream links
from . import session_meta  # noqa: F401  session tools: per-session runtime metadata
from . import transcripts  # noqa: F401  session tools: transcripts
from . import runs  # noqa: F401  session tools: child runs
from . import serving  # noqa: F401  several processes: servers, claims, change log, wake slots
