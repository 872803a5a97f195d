"""``locked``: the store's one RLock around a service's public method (background runner
threads and agent turns share the connection, the queue and the wake times). The store's
``transaction()`` takes the same lock, so there is one lock however a call is entered."""

from __future__ import annotations

import functools
from typing import Callable, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


def locked(method: Callable[_P, _R]) -> Callable[_P, _R]:
    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with args[0].store.lock:  # type: ignore[attr-defined]  # every service holds its store
            return method(*args, **kwargs)

    return wrapper
