"""An MCP server for the session tools and the notice flow (the optional extra ``[mcp]``).

``sessionstate mcp --db URL --session KEY`` serves it over stdio; ``SessionToolServer`` is the
same server for embedding or in-memory tests. Importing this package imports the ``mcp`` SDK,
which ``import sessionstate`` never does. See ``docs/mcp.md``.
"""

from .server import DEFAULT_POLL_INTERVAL, NOTICES_MIME_TYPE, SessionToolServer, serve_stdio
from .uris import notices_uri, session_of_notices_uri

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "NOTICES_MIME_TYPE",
    "SessionToolServer",
    "notices_uri",
    "serve_stdio",
    "session_of_notices_uri",
]
