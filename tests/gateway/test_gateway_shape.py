"""The facade's shape: ``Gateway`` answers to the protocol and its named parts, nothing more;
every name of the previous release still works for one release, with a DeprecationWarning."""

from __future__ import annotations

import inspect
import warnings

import pytest

from sessionstate import Gateway
from sessionstate.facade.aio import AsyncGateway
from sessionstate.facade.gateway import DEPRECATED, PUBLIC_NAMES, PartMethod
from sessionstate.services.notice.protocol import NoticeProtocol
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


def test_protocol_methods_are_the_protocols_own():
    # No second signature: each is a descriptor naming the protocol's function.
    for name, member in vars(Gateway).items():
        if isinstance(member, PartMethod):
            assert member.method is getattr(NoticeProtocol, name)
            assert inspect.signature(member) == inspect.signature(getattr(NoticeProtocol, name))


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


def test_every_deprecated_name_warns_and_reaches_its_new_home(tmp_path):
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        for old, new in DEPRECATED.items():
            target: object = gw
            for part in new.split("."):
                target = getattr(target, part)
            with pytest.warns(DeprecationWarning, match=f"Gateway.{old} is deprecated"):
                value = getattr(gw, old)
            if callable(target) and not isinstance(target, (dict, int, float)):
                assert value == target, old  # the same bound method
            else:
                assert value == target, old
            assert old not in dir(gw)


def test_deprecated_names_still_work(tmp_path):
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        with pytest.warns(DeprecationWarning):
            gw.create_session(W)  # type: ignore[attr-defined]
        gw.create_session(T)
        with pytest.warns(DeprecationWarning):
            assert gw.ops.session_exists(T)  # type: ignore[attr-defined]
        with pytest.warns(DeprecationWarning):
            gw.ops.retention_days = 3  # type: ignore[misc]
        assert gw.ops.retention_days == 3
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert gw.registry.session_meta(W).session_id  # the new name: no warning
        with pytest.raises(AttributeError):
            gw.no_such_name  # type: ignore[attr-defined]


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
