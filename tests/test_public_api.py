"""The package's public API: what ``sessionstate.__all__`` names is importable, every exception a
caller may have to catch is among it, and every class a public signature takes or returns is
importable from ``sessionstate`` (or is a builtin, the standard library's or ``typing``'s).

The signatures walked: ``Gateway``, ``AsyncGateway``, the gateway's parts (``ops``,
``registry``, ``transcripts``, ``producers``, ``runs``, ``cluster``; ``AsyncGateway``'s parts
are the same methods as coroutines, their signatures copied from these), every class and
function in ``__all__``, and every class of the package those signatures reach (a ``Store``
reached through ``transaction()`` is walked too). A class's signatures are its public methods,
properties and class-level annotations (a ``TypedDict``'s or ``NamedTuple``'s fields)."""

from __future__ import annotations

import collections.abc
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Literal, Optional

import pytest

import sessionstate
from sessionstate import Gateway, errors

# The parts are made by ``Gateway`` (their constructors take the gateway's own services): their
# ``__init__`` is not a signature a user calls.
PART_ATTRIBUTES = ("ops", "registry", "transcripts", "producers", "runs", "cluster")


def error_classes(module: ModuleType) -> set[str]:
    """The public classes of ``module`` that are ``SessionStateError`` or below it."""
    return {
        name for name, value in vars(module).items()
        if not name.startswith("_") and isinstance(value, type) and issubclass(value, errors.SessionStateError)
    }


def test_the_error_class_finder_sees_a_new_class():
    probe = ModuleType("probe")
    probe.Refused = type("Refused", (errors.StorageError,), {})  # type: ignore[attr-defined]
    probe._Hidden = type("_Hidden", (errors.SessionStateError,), {})  # type: ignore[attr-defined]
    probe.Unrelated = type("Unrelated", (ValueError,), {})  # type: ignore[attr-defined]
    probe.SessionStateError = errors.SessionStateError  # type: ignore[attr-defined]
    assert error_classes(probe) == {"Refused", "SessionStateError"}


def test_every_error_class_is_exported():
    found = error_classes(errors)
    assert {"SessionStateError", "StorageError", "StorageConflict"} <= found
    assert sorted(found - set(sessionstate.__all__)) == []
    assert all(getattr(sessionstate, name) is getattr(errors, name) for name in found)


def test_every_name_in_all_is_defined():
    assert [name for name in sessionstate.__all__ if not hasattr(sessionstate, name)] == []


# -- the types of the public signatures -----------------------------------------------------


def annotation_classes(annotation: object) -> Iterator[object]:
    """The classes an annotation names: ``Optional``, unions, containers, ``Callable``'s
    parameters and result, ``Annotated``, ``Unpack`` and type variables' bounds unwrapped;
    ``Literal``'s values are values, not classes."""
    if annotation is None or annotation is type(None) or annotation is Ellipsis or annotation is Any:
        return
    if isinstance(annotation, (list, tuple)):  # Callable's parameter list
        for item in annotation:
            yield from annotation_classes(item)
        return
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return
    if origin is not None:
        if isinstance(origin, type):  # list, dict, collections.abc.Callable, a generic class of ours
            yield origin
        for argument in typing.get_args(annotation):
            yield from annotation_classes(argument)
        return
    if isinstance(annotation, typing.TypeVar):
        if annotation.__bound__ is not None:
            yield from annotation_classes(annotation.__bound__)
        for constraint in annotation.__constraints__:
            yield from annotation_classes(constraint)
        return
    if isinstance(annotation, (typing.ParamSpec, typing.ParamSpecArgs, typing.ParamSpecKwargs)):
        return
    if annotation in (typing.NoReturn, typing.Never, typing.Self, typing.LiteralString):
        return
    yield annotation  # a class, or something this walk does not know (reported as such)


def public_class(value: object) -> bool:
    """Importable from ``sessionstate`` under its own name, or a builtin, the standard
    library's or ``typing``'s."""
    module = getattr(value, "__module__", None) or ""
    if module == "builtins" or module.partition(".")[0] in sys.stdlib_module_names:
        return True
    name = getattr(value, "__name__", None)
    return name is not None and getattr(sessionstate, name, None) is value and name in sessionstate.__all__


def hints(function: Any) -> dict[str, Any]:
    """The function's (or class's) annotations, resolved; ``NameError`` names a type its module
    cannot resolve at run time, which is a defect of the signature too."""
    return typing.get_type_hints(function, include_extras=True)


def signatures(cls: type, *, with_init: bool = True) -> Iterator[tuple[str, Any]]:
    """``cls``'s public signatures: (where, the callable or class whose annotations count)."""
    if not issubclass(cls, BaseException):
        yield f"{cls.__qualname__} (fields)", cls
    for name in dir(cls):
        if name.startswith("_") and not (name == "__init__" and with_init and "__init__" in vars(cls)):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        elif isinstance(member, property):
            member = member.fget
        member = getattr(member, "method", member)  # a ``PartMethod``: its part's function
        if inspect.isfunction(member):
            yield f"{cls.__qualname__}.{name}", member


def unexported_types(roots: list[type], functions: dict[str, Any]) -> dict[str, list[str]]:
    """Each class a signature of ``roots`` (and the package's classes they reach) or of
    ``functions`` names that is not public, with where it was met."""
    found: dict[str, list[str]] = {}
    walked: set[type] = set()
    queue: list[tuple[type, bool]] = [(cls, cls not in PART_CLASSES) for cls in roots]
    items: list[tuple[str, Any]] = list(functions.items())
    while queue or items:
        if queue:
            cls, with_init = queue.pop()
            if cls in walked:
                continue
            walked.add(cls)
            items.extend(signatures(cls, with_init=with_init))
            continue
        where, function = items.pop()
        for parameter, annotation in hints(function).items():
            for named in annotation_classes(annotation):
                if not public_class(named):
                    label = f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', named)}"
                    found.setdefault(label, []).append(f"{where}: {parameter}")
                elif isinstance(named, type) and named.__module__.startswith("sessionstate"):
                    queue.append((named, True))
    return found


def part_classes() -> tuple[type, ...]:
    with Gateway.open("sqlite://", auto_prune=False) as gw:
        return tuple(type(getattr(gw, name)) for name in PART_ATTRIBUTES)


PART_CLASSES = part_classes()


def public_roots() -> tuple[list[type], dict[str, Any]]:
    """The classes and functions the walk starts from: the gateways, the parts, ``__all__``."""
    classes: list[type] = [Gateway, sessionstate.AsyncGateway, *PART_CLASSES]
    functions: dict[str, Any] = {}
    for name in sessionstate.__all__:
        value = getattr(sessionstate, name)
        if isinstance(value, type):
            classes.append(value)
        elif inspect.isfunction(value):
            functions[name] = value
    return classes, functions


def alias_problems() -> list[str]:
    """The exported type aliases (``SessionRef``, ``Clock``, ...) name public classes only."""
    aliases = {name: value for name in sessionstate.__all__
               if typing.get_origin(value := getattr(sessionstate, name)) is not None}
    assert {"SessionRef", "Clock", "WakeHook"} <= aliases.keys()
    return sorted(f"{name}: {named}" for name, value in aliases.items()
                  for named in annotation_classes(value) if not public_class(named))


def test_every_type_a_public_signature_names_is_exported():
    classes, functions = public_roots()
    assert unexported_types(classes, functions) == {}
    assert alias_problems() == []


def test_the_walk_reaches_the_parts_and_what_they_return():
    # what the test above relies on: the parts' classes and the store are walked (a class the
    # walk never reached could hide an unexported type).
    assert {cls.__name__ for cls in PART_CLASSES} == {
        "NoticeProtocol", "Registry", "Transcripts", "Producers", "Runs", "Cluster"}
    walked = [where for cls in PART_CLASSES for where, _ in signatures(cls, with_init=False)]
    assert "Registry.create_session" in walked and "Cluster.attach" in walked
    assert "NoticeProtocol.record_event" in walked and "Runs.runner" in walked
    assert "Gateway.configure_tools" in [where for where, _ in signatures(Gateway)]


def test_removing_an_export_fails_the_walk(monkeypatch: pytest.MonkeyPatch):
    # ``Gateway.configure_tools`` takes a ToolPolicy; ``transaction()`` yields a Store;
    # ``registry.session_meta`` returns a MetaRecord: each missing export is reported.
    for name in ("ToolPolicy", "Store", "MetaRecord"):
        monkeypatch.delattr(sessionstate, name)
    monkeypatch.setattr(sessionstate, "__all__", [n for n in sessionstate.__all__
                                                  if n not in ("ToolPolicy", "Store", "MetaRecord")])
    classes, functions = public_roots()
    found = unexported_types(classes, functions)
    assert "Gateway.configure_tools: policy" in found["sessionstate.shared.policy.ToolPolicy"]
    assert "Gateway.transaction: return" in found["sessionstate.store.contract.Store"]
    assert "Registry.session_meta: return" in found["sessionstate.store.records.MetaRecord"]


class _Hidden:
    """A class of no public module (this test module's): what a defective signature names."""


def _probe(
    a: Optional[_Hidden],
    b: "int | dict[str, list[_Hidden]]",
    c: Callable[[_Hidden], None],
    d: Literal["x", "y"],
    e: collections.abc.Sequence[tuple[str, _Hidden]],
) -> typing.Iterator[_Hidden]:
    raise NotImplementedError


def test_the_walk_unwraps_optional_unions_containers_callable_and_literal():
    found = unexported_types([], {"probe": _probe})
    assert sorted(found[f"{__name__}._Hidden"]) == [
        "probe: a", "probe: b", "probe: c", "probe: e", "probe: return"]
    assert len(found) == 1  # Literal's values and the containers are fine
