"""The facade's doors are its named parts: the services a ``Gateway`` shows are exactly the
parts ``PUBLIC_NAMES`` lists (``registry``, ``transcripts``, ``producers``, ``runs``,
``cluster``, ``ops``) and the protocol's own methods (``record_event``, ...); no other
attribute or property is a service, nor a method bound to one (an alias next to the part)."""

from __future__ import annotations

import inspect
from typing import Any

from sessionstate import Gateway
from sessionstate.facade.gateway import PartMethod

PARTS = ["cluster", "ops", "producers", "registry", "runs", "transcripts"]


def _service_owner(value: Any) -> str | None:
    """The services module of ``value``, or of the object a bound method belongs to."""
    owner = value.__self__ if inspect.ismethod(value) else value
    module = type(owner).__module__
    return module if module.startswith("sessionstate.services") else None


def service_doors(gateway: Gateway) -> list[str]:
    """The gateway's public names that reach a service, apart from the protocol methods
    (descriptors of ``Gateway`` naming ``NoticeProtocol``'s own functions)."""
    return sorted(
        name for name in dir(gateway) if not name.startswith("_")
        if not isinstance(inspect.getattr_static(type(gateway), name, None), PartMethod)
        if _service_owner(getattr(gateway, name)) is not None
    )


class LeakyGateway(Gateway):
    """The two ways a second door opens: a service as a property, and a service's bound
    method set on the instance next to its part."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session_meta = self.registry.session_meta

    @property
    def serving_table(self) -> object:
        return self.ops.cluster


def test_the_gateway_shows_only_its_parts(db_url):
    with Gateway.open(db_url) as gw:
        gw.create_session("agent:main:main")
        assert service_doors(gw) == PARTS
        assert gw.allowed_tools("agent:main:main")  # the tools' door is the gateway's method


def test_the_door_check_can_fail(db_url):
    with Gateway.open(db_url) as plain:
        store = plain.store
        gw = LeakyGateway(store)
        assert service_doors(gw) == sorted([*PARTS, "serving_table", "session_meta"])
