"""scripts/mutmut_unwrap_locked.py: the rewrite that lets mutmut reach ``@locked`` methods moves
the decorator after the class and keeps the method under the same lock."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_unwrap():
    spec = importlib.util.spec_from_file_location("mutmut_unwrap_locked", ROOT / "scripts" / "mutmut_unwrap_locked.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.unwrap


SOURCE = '''
from sessionstate.services.locking import locked


class Service:
    def __init__(self, store):
        self.store = store

    @locked
    def held(self):
        return self.store.lock._is_owned()

    @property
    def plain(self):
        return self.store.lock._is_owned()
'''


class Store:
    def __init__(self) -> None:
        self.lock = threading.RLock()


def test_a_locked_method_loses_its_decorator_and_keeps_its_lock():
    text, moved = load_unwrap()(SOURCE)
    assert moved == 1
    assert "@locked" not in text and "@property" in text  # only the lone @locked moves
    assert "Service.held = locked(Service.held)" in text
    namespace: dict[str, object] = {}
    exec(compile(text, "unwrapped", "exec"), namespace)
    service = namespace["Service"](Store())  # type: ignore[operator]
    assert service.held() is True  # called under the store's lock, as before the rewrite
    assert service.plain is False


def test_every_services_file_still_compiles_after_the_rewrite():
    unwrap = load_unwrap()
    total = 0
    for path in sorted((ROOT / "sessionstate" / "services").rglob("*.py")):
        text, moved = unwrap(path.read_text())
        compile(text, str(path), "exec")
        assert text.count("@locked") == 0, path
        total += moved
    assert total == sum(p.read_text().count("    @locked\n") for p in (ROOT / "sessionstate" / "services").rglob("*.py"))
    assert total > 0
