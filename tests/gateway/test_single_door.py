"""The facade is the only door: no public attribute or property of a ``Gateway`` is one of its
services, nor a method bound to one (the old ``gw.protocol``, ``gw.registry``, ...; and the
``record_event`` that was the protocol's own bound method)."""

from __future__ import annotations

import inspect
from typing import Any

from sessionstate import Gateway


def _service_owner(value: Any) -> str | None:
    """The services module of ``value``, or of the object a bound method belongs to."""
    owner = value.__self__ if inspect.ismethod(value) else value
    module = type(owner).__module__
    return module if module.startswith("sessionstate.services") else None


def service_doors(gateway: Gateway) -> list[str]:
    return sorted(
        f"{name} -> {owner}" for name in dir(gateway) if not name.startswith("_")
        if (owner := _service_owner(getattr(gateway, name))) is not None
    )


class LeakyGateway(Gateway):
    """The two ways a second door opened before: a service as a property, and a service's
    bound method set on the instance."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record_event = self._protocol.record_event  # type: ignore[method-assign]

    @property
    def registry(self) -> object:
        return self._registry


def test_the_gateway_exposes_no_service(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session("agent:main:main")
        assert service_doors(gw) == []
        assert gw.allowed_tools("agent:main:main")  # the tools' door is the gateway's method


def test_the_door_check_can_fail(db_url):
    with Gateway.open(db_url) as plain:
        store = plain.store
        gw = LeakyGateway(store)
        assert service_doors(gw) == [
            "record_event -> sessionstate.services.notice.protocol",
            "registry -> sessionstate.services.registry",
        ]
