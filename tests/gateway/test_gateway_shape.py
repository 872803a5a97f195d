"""The facade's shape: ``Gateway`` answers to the protocol and its named parts, nothing more,
and no name answers with a ``DeprecationWarning`` (1.0 is the first release)."""

from __future__ import annotations

import inspect
import warnings

import pytest

from sessionstate import Gateway
from sessionstate.facade.aio import AsyncGateway
from sessionstate.facade.gateway import PUBLIC_NAMES, PartMethod
from sessionstate.services.notice.protocol import NoticeProtocol
from sessionstate.services.registry import Registry
from sessionstate.services.notice.recording import EventArgs

W, T = "agent:w:main", "agent:t:main"


def public_names(obj: object) -> list[str]:
    return sorted(name for name in dir(obj) if not name.startswith("_"))


def test_the_gateway_has_the_listed_names_and_at_most_25(tmp_path):
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        assert public_names(gw) == sorted(PUBLIC_NAMES)
    assert len(PUBLIC_NAMES) <= 25


def test_the_shape_check_sees_an_added_name(tmp_path):
    # Probe: a name added to a gateway shows in the listing the test above compares.
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        gw.extra = 1  # type: ignore[attr-defined]
        assert public_names(gw) != sorted(PUBLIC_NAMES)


def test_part_methods_are_the_parts_own():
    # No second signature: each is a descriptor naming its part's function; create_session is
    # the registry's (one verb: the session and its metadata row), the rest the protocol's.
    parts = {"ops": NoticeProtocol, "registry": Registry}
    found = {}
    for name, member in vars(Gateway).items():
        if isinstance(member, PartMethod):
            assert member.method is getattr(parts[member.part], name)
            assert inspect.signature(member) == inspect.signature(getattr(parts[member.part], name))
            found[name] = member.part
    assert found["create_session"] == "registry" and found["record_event"] == "ops"
    assert not hasattr(Registry, "register_session")


def test_create_session_is_the_registrys_and_bound_per_gateway(tmp_path):
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        assert gw.create_session == gw.registry.create_session
        session_id = gw.create_session(W, channel="slack")
        assert gw.registry.session_meta(W).session_id == session_id
        assert gw.registry.session_meta(W).channel == "slack"


def test_record_event_keywords_are_written_once():
    for function in (NoticeProtocol.record_event, NoticeProtocol.prepare_event):
        parameters = inspect.signature(function).parameters
        assert list(parameters) == ["self", "session_key", "kind", "event"], function
    assert set(EventArgs.__required_keys__) == {"actor_type", "summary"}
    assert "event" in inspect.signature(AsyncGateway.record_event).parameters


def test_record_event_refuses_unknown_and_missing_keywords(tmp_path):
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        gw.create_session(T)
        with pytest.raises(TypeError, match="unexpected"):
            gw.record_event(T, "goal_changed", actor_type="human", summary="x", colour="red")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="missing"):
            gw.record_event(T, "goal_changed", actor_type="human")  # type: ignore[call-arg]
        assert gw.ops.state_version(T) == 1  # only ``created``: nothing was recorded


def test_no_gateway_name_answers_with_a_deprecation_warning(tmp_path):
    # Every public name and every name of the parts is an error-free lookup; a name the
    # gateway does not have raises AttributeError, as on any object (no forwarding).
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for name in dir(gw):
                getattr(gw, name)
            for old in ("session_exists", "register_session", "attach", "diagnostics", "retention_days", "_protocol"):
                with pytest.raises(AttributeError):
                    getattr(gw, old)
        assert "__getattr__" not in vars(Gateway) and "__setattr__" not in vars(Gateway)


def test_async_gateway_mirrors_the_parts(tmp_path):
    import anyio

    async def main() -> None:
        agw = await AsyncGateway.open(str(tmp_path / "a.db"))
        try:
            await agw.create_session(W)
            await agw.create_session(T)
            assert await agw.cluster.serves(W)
            assert (await agw.ops.diagnostics()).server_id is None
            assert await agw.record_event(T, "goal_changed", actor_type="human", summary="x") is not None
            assert agw.runs.executor is agw.gateway.runs.executor  # a plain attribute, as it is
        finally:
            await agw.close()

    anyio.run(main)
