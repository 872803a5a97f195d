"""The package's layering, read from its source: no import cycle; no object reaching
another's private names, no module importing them; one import style; one lock; the store's
connection stays inside it.

Every import counts, also the ones under ``if TYPE_CHECKING:`` and inside functions: a layer
that needs another only for its types still depends on it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sessionstate"
ROOT = PACKAGE.parent
STORE = PACKAGE / "store"
# NamedTuple's public API starts with an underscore; so do dunders.
ALLOWED_PRIVATE = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports (a name imported from a package counts as
    the submodule when there is one, else as the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    found.add(f"{source}.{alias.name}")
                elif source in known:
                    found.add(source)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_walker_sees_a_cycle_when_there_is_one():
    graph = import_graph()
    assert "sessionstate.tools.dispatch" in graph["sessionstate.facade.gateway"]  # the facade dispatches to the tools
    graph["sessionstate.tools.context"] = graph["sessionstate.tools.context"] | {"sessionstate.facade.gateway"}
    assert find_cycle(graph) is not None


def test_the_package_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def tool_layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """The tools sit between the services and the facade and see only their host protocol
    (tools/host.py): nothing below the facade imports them, and they import no service and
    nothing above themselves (the gateway hands them their host with each call)."""
    tools = {m for m in graph if layer_of(m) == "tools"}
    return sorted(
        [f"{m} imports {i}" for m in graph if LAYERS.index(layer_of(m)) < LAYERS.index("tools")
         for i in graph[m] & tools]
        + [f"{m} imports {i}" for m in tools for i in graph[m]
           if layer_of(i) == "services" or LAYERS.index(layer_of(i)) > LAYERS.index("tools")]
    )


def test_the_tools_see_only_their_host():
    graph = import_graph()
    assert tool_layer_violations(graph) == []
    graph["sessionstate.tools.context"] = graph["sessionstate.tools.context"] | {"sessionstate.facade.gateway"}
    graph["sessionstate.services.registry"] = graph["sessionstate.services.registry"] | {"sessionstate.tools.dispatch"}
    assert tool_layer_violations(graph) == [
        "sessionstate.services.registry imports sessionstate.tools.dispatch",
        "sessionstate.tools.context imports sessionstate.facade.gateway",
    ]


# The layers, lowest first: a module may import its own layer and the ones below it. Each
# layer is a folder of the package; the package's root holds only the public doors (the API
# re-exports, ``aio``, deprecated paths, ``__main__``) and ``errors``, which every layer raises.
# The tools sit below the facade: the gateway hands them a host (tools/host.py) and they import
# neither it nor a service.
LAYERS = ("errors", "statemachine", "store", "shared", "runner", "services", "tools", "facade",
          "upstream", "verify", "conformance", "clients", "api")
ABOVE_THE_FACADE = LAYERS[LAYERS.index("facade") + 1:]


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return parts[1]  # the folder is the layer
    return "errors" if parts[1:] == ["errors"] else "api"


def unlayered_folders(package: Path) -> list[str]:
    """Subpackages of ``package`` that name no layer (a new folder must take its place in LAYERS)."""
    return sorted(path.name for path in package.iterdir()
                  if (path / "__init__.py").is_file() and path.name not in LAYERS)


def test_every_folder_is_a_layer():
    assert unlayered_folders(PACKAGE) == []
    assert {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()} == (
        set(LAYERS) - {"errors", "api"})


def test_the_folder_check_can_fail(tmp_path: Path):
    for folder in ("store", "widgets"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    assert unlayered_folders(tmp_path) == ["widgets"]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} ({layer_of(module)}) imports {imported} ({layer_of(imported)})"
        for module, imports in graph.items() for imported in imports
        if LAYERS.index(layer_of(imported)) > LAYERS.index(layer_of(module))
    )


def door_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {imported}"
        for module, imports in graph.items() if layer_of(module) in ("tools", *ABOVE_THE_FACADE)
        for imported in imports if layer_of(imported) == "services"
    )


def test_every_module_has_its_layer():
    graph = import_graph()
    assert {layer_of(m) for m in graph} == set(LAYERS)
    assert layer_of("sessionstate.services.notice.protocol") == "services"
    assert layer_of("sessionstate.tools.dispatch") == "tools"
    assert layer_of("sessionstate.clients.mcp.server") == "clients"


def test_the_layer_check_can_fail():
    graph = import_graph()
    graph["sessionstate.store.sqlite"] = graph["sessionstate.store.sqlite"] | {"sessionstate.services.cluster"}
    graph["sessionstate.tools.dispatch"] = graph["sessionstate.tools.dispatch"] | {"sessionstate.services.registry"}
    assert layer_violations(graph) == [
        "sessionstate.store.sqlite (store) imports sessionstate.services.cluster (services)"]
    assert door_violations(graph) == ["sessionstate.tools.dispatch imports sessionstate.services.registry"]


def test_no_module_imports_a_layer_above_its_own():
    assert layer_violations(import_graph()) == []


def test_outside_the_runtime_nothing_reaches_a_service():
    assert door_violations(import_graph()) == []


def test_the_store_imports_nothing_above_it():
    graph = import_graph()
    for module, imports in graph.items():
        if module.startswith("sessionstate.store"):
            above = {m for m in imports if not m.startswith("sessionstate.store")} - {"sessionstate.errors"}
            assert not above, (module, above)


def private_accesses(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls`` and ``_name`` is not defined in the same
    module (a module may use its own classes' private names, as a class and its helper do)."""
    tree = ast.parse(path.read_text(), str(path))
    defined = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute):
                defined.add(target.attr)
            elif isinstance(target, ast.Name):
                defined.add(target.id)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    defined.add(item.target.id)
            for keyword in node.keywords:
                if keyword.arg == "__slots__":
                    defined.add(keyword.arg)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            if isinstance(node.value, (ast.Tuple, ast.List)):
                defined.update(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in ALLOWED_PRIVATE:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if name in defined:
            continue
        found.append(f"{_shown(path)}:{node.lineno}: .{name}")
    return found


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def store_private_names() -> set[str]:
    """The private attributes the store's classes set on themselves (``self._name = ...``):
    its connections, cursors and transaction bookkeeping."""
    names = set()
    for path in sorted(STORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                names.add(node.attr)
    return names


def store_private_reads(paths: list[Path]) -> list[str]:
    """Accesses to a store-private name from a module that does not define that name itself."""
    private = store_private_names()
    return [hit for path in paths for hit in private_accesses(path) if hit.rpartition(": .")[2] in private]


def outside_the_store() -> list[Path]:
    """Every module but the store's own: the rest of the package, the tests, the benchmarks."""
    roots = (PACKAGE, ROOT / "tests", ROOT / "benchmarks")
    return sorted(p for r in roots for p in r.rglob("*.py") if STORE not in p.parents)


def test_the_private_access_check_can_fail(tmp_path):
    probe = PACKAGE / "_probe_private_access.py"
    try:
        probe.write_text("def peek(gw):\n    return gw._lock\n")
        assert private_accesses(probe) == ["sessionstate/_probe_private_access.py:2: ._lock"]
    finally:
        probe.unlink()


def test_no_object_reaches_into_another_ones_private_names():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in private_accesses(path)]
    assert found == []


def test_the_store_private_read_check_can_fail(tmp_path):
    assert {"_db", "_pg"} <= store_private_names()  # both backends' connections are covered
    probe = tmp_path / "bench_probe.py"
    probe.write_text("def setup(gw):\n    gw.store._db.execute('DELETE FROM sessions')\n    return gw.store._pg\n")
    assert sorted(store_private_reads([probe])) == [f"{probe}:2: ._db", f"{probe}:3: ._pg"]


def test_nothing_outside_the_store_reads_its_private_attributes():
    """Tests and benchmarks too: they use the store's public methods (``pragma``, ``run_sql``,
    ``trace_statements`` on SQLite), so the store can change what it keeps privately."""
    paths = outside_the_store()
    assert any(p.parent.name == "benchmarks" for p in paths) and any(p.parent.name == "tests" for p in paths)
    assert store_private_reads(paths) == []


def private_imports(path: Path) -> list[str]:
    """``from .x import _name``: a module taking another module's private name. Only our own
    modules count: relative imports, and absolute ones of the package, the tests or a module
    beside this one (the benchmarks' ``_support``); ``os._exit`` is the standard library's
    documented API."""
    tree = ast.parse(path.read_text(), str(path))
    ours = {PACKAGE.name, "tests"} | {p.stem for p in path.parent.glob("*.py")}
    return [
        f"{_shown(path)}:{node.lineno}: {'.' * node.level}{node.module or ''} {alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in ours)
        for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_the_private_import_check_can_fail(tmp_path):
    probe = PACKAGE / "_probe_private_import.py"
    try:
        probe.write_text("from os import _exit\nfrom .keys import __all__\n"
                         "from .demo.story import MANAGER, _hidden\n\n\ndef f():\n    from . import _x\n")
        assert private_imports(probe) == [
            "sessionstate/_probe_private_import.py:3: .demo.story _hidden",
            "sessionstate/_probe_private_import.py:7: . _x",
        ]
    finally:
        probe.unlink()
    (tmp_path / "helpers.py").write_text("")
    test = tmp_path / "test_probe.py"
    test.write_text("from tests.backends import _admin\nfrom sessionstate.shared.keys import _split\n"
                    "from helpers import _made\nfrom os import _exit\n")
    assert [hit.rpartition(": ")[2] for hit in private_imports(test)] == [
        "tests.backends _admin", "sessionstate.shared.keys _split", "helpers _made"]


def test_no_module_imports_another_ones_private_names():
    """The package's modules, the tests and the benchmarks alike."""
    paths = [p for root in (PACKAGE, ROOT / "tests", ROOT / "benchmarks") for p in sorted(root.rglob("*.py"))]
    assert [hit for path in paths for hit in private_imports(path)] == []


def test_one_import_style_inside_the_package():
    """Relative imports between the package's own modules, never ``import sessionstate...``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            absolute = (
                isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "sessionstate"
            ) or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sessionstate" for a in node.names))
            if absolute:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert found == []


def test_the_reference_model_imports_nothing_from_the_package():
    """The one reference model (stateful tests and model check) is the independent side."""
    path = PACKAGE / "verify" / "refmodel.py"
    tree = ast.parse(path.read_text(), str(path))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {("." * node.level) + (node.module or "") for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"__future__", "dataclasses", "datetime", "typing"}


PARTS = {"ops": "OpsPart", "registry": "RegistryPart", "transcripts": "TranscriptsPart", "runs": "RunsPart"}


def host_calls(sources: list[str]) -> set[str]:
    """What the tools take of their host: ``gw.<name>`` and ``ctx.gw.<name>``, and for a part
    ``gw.<part>.<name>`` as ``"<part>.<name>"``."""
    names = set()

    def is_host(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "gw") or (
            isinstance(node, ast.Attribute) and node.attr == "gw")

    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute):
                owner = node.value
                if is_host(owner):
                    names.add(node.attr)
                elif isinstance(owner, ast.Attribute) and owner.attr in PARTS and is_host(owner.value):
                    names.add(f"{owner.attr}.{node.attr}")
    return names


def host_members(source: str) -> set[str]:
    classes = {n.name: n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)}

    def members(name: str) -> set[str]:
        body = classes[name].body
        return {item.name for item in body if isinstance(item, ast.FunctionDef)} | {
            item.target.id for item in body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}

    return members("ToolHost") | {f"{part}.{name}" for part, protocol in PARTS.items() for name in members(protocol)}


def test_the_tool_host_names_exactly_what_the_tools_call():
    tools = PACKAGE / "tools"
    sources = [p.read_text() for p in sorted(tools.glob("*.py")) if p.name != "host.py"]
    members = host_members((tools / "host.py").read_text())
    assert host_calls(sources) == members
    # the check can fail: a call the protocol does not name, and a member nobody calls
    assert host_calls(sources + ["def f(ctx):\n    ctx.gw.registry.forget(1)\n"]) - members == {"registry.forget"}
    assert "runs.steer_run" in members - host_calls([s for s in sources if "steer_run" not in s])
