"""A delaying relay in front of a PostgreSQL test server, and a bare psycopg connection to it:
what a benchmark needs to put a network's latency between a client and the server.

``relay(url, delay)`` starts (on a daemon thread of the calling process) a TCP listener on
127.0.0.1 that forwards to the server's Unix socket, holding every chunk ``delay`` seconds in
each direction (equal delays keep the order), and returns the URL through it. The studies
beside it (``pg_batch.py``, ``pg_round_trips.py``) import it from here.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["connect", "relay"]


def connect(url: str) -> Any:
    """A bare autocommit psycopg connection to ``url`` (a SQLAlchemy-style URL)."""
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    query = {k: v for k, v in parsed.query.items() if isinstance(v, str)}
    return psycopg.connect(dbname=parsed.database, user=parsed.username, password=parsed.password,
                           host=parsed.host or query.pop("host", None), port=parsed.port, autocommit=True, **query)


def relay(url: str, delay: float) -> str:
    """Start the relay to the server of ``url``; the URL through it."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    socket_path = f"{parsed.query['host']}/.s.PGSQL.{parsed.port or 5432}"
    started: dict[str, int] = {}
    ready = threading.Event()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while data := await reader.read(65536):
            loop.call_later(delay, writer.write, data)
        loop.call_later(delay, writer.close)

    async def serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_unix_connection(socket_path)
        await asyncio.gather(pump(client_reader, server_writer), pump(server_reader, client_writer))

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        started["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        await server.serve_forever()

    threading.Thread(target=asyncio.run, args=(main(),), daemon=True).start()
    ready.wait()
    query = {k: v for k, v in parsed.query.items() if k != "host"}
    return parsed.set(host="127.0.0.1", port=started["port"], query=query).render_as_string(hide_password=False)
