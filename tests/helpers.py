"""What tests of more than one package share: the fake clock a gateway is given, moved by the
test so that nothing is timed."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
