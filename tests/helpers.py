"""What tests of more than one package share: the fake clock a gateway is given, moved by the
test so that nothing is timed; main sessions of three agents, W and W2 watching T, made on a
database by ``populate`` (the serving, pump and PostgreSQL feed tests), and the human line on T
that owes each watcher a notice."""

from __future__ import annotations

from sessionstate import Gateway

W, T, W2 = "agent:a:main", "agent:b:main", "agent:c:main"
# Each session logs its own `created` first (R27): W is 1, T is 2, so a watch of T made after
# both starts at 2, and its first notice says changesSince 2.
SEED = 2


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def populate(url: str, watchers: tuple[str, ...] = (W, W2)) -> str:
    """The first watcher's session, T's, then the other watchers', each watching T from SEED."""
    first, *others = watchers
    with Gateway.open(url) as gw:
        for key in (first, T, *others):
            gw.create_session(key)
        for watcher in watchers:
            gw.watch(watcher, T)
            assert gw.ops.cursor_positions(watcher, T).last_seen == SEED
    return url


def human(gw: Gateway) -> int:
    """A human's line on T; its sequence."""
    sequence = gw.record_event(T, "human_direct_message", actor_type="human", summary="hi")
    assert sequence is not None
    return sequence
