"""The import graph of wpultr/ against the layer table of docs/ARCHITECTURE.md (read from the document).

Every module is parsed with `ast`; imports inside functions count (a deferred import is still a
dependency), relative imports are resolved against the module's package. The graph must have no
cycle, and no module may import one in a higher layer; read as folders (a folder `wpultr.<pkg>` or a top-level
module is one room, an import between rooms an arrow), no arrow may run up the table and no two rooms import
each other, directly or around a loop.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "wpultr"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
_ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The wpultr modules `name` imports anywhere in its body. `from pkg import sub` of a submodule counts
    as an import of the submodule only (pkg/__init__ runs too, but holds nothing the importer uses)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets = subs + ([base] if len(subs) < len(node.names) else [])
        for target in targets:
            hit = owner(target)
            if hit and hit != name and not name.startswith(hit + "."):
                found.add(hit)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def layer_table() -> dict[str, int]:
    """{module or package prefix: layer} from the rows `| <layer> | `module`, ... |` of ARCHITECTURE.md."""
    table: dict[str, int] = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        row = _ROW.match(line)
        if row:
            for entry in re.findall(r"`([\w.]+)`", row.group(2)):
                assert entry not in table, f"{entry} is listed in two layers"
                table[entry] = int(row.group(1))
    return table


def layer_of(name: str, table: dict[str, int]) -> int | None:
    """The layer of the longest table entry that is `name` or a package holding it (the root only exactly)."""
    best = None
    for entry, layer in table.items():
        covers = name == entry or (entry != "wpultr" and name.startswith(entry + "."))
        if covers and (best is None or len(entry) > len(best[0])):
            best = (entry, layer)
    return None if best is None else best[1]


def room_of(name: str) -> str:
    """The folder a module sits in: `wpultr.<pkg>` for a module of a package, the module itself at the top."""
    return ".".join(name.split(".")[:2])


def folder_graph() -> dict[str, dict[str, tuple[str, str]]]:
    """{room: {room it imports: (an importing module, the module it imports)}} from the real imports."""
    graph: dict[str, dict[str, tuple[str, str]]] = {}
    for module, deps in sorted(import_graph().items()):
        arrows = graph.setdefault(room_of(module), {})
        for dep in sorted(deps):
            if room_of(dep) != room_of(module):
                arrows.setdefault(room_of(dep), (module, dep))
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (each is an import cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_checker_sees_deferred_and_relative_imports(tmp_path):
    """A deferred relative import inside a function is an edge; `from pkg import sub` points at sub."""
    known = {"wpultr.a", "wpultr.a.x", "wpultr.a.y", "wpultr.b"}
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from ..b import thing\n    from . import y\n")
    assert imports_of("wpultr.a.x", source, known) == {"wpultr.b", "wpultr.a.y"}
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert strongly_connected(import_graph()) == []


def test_every_module_has_a_layer_and_every_entry_exists():
    table = layer_table()
    assert len(table) > 10, f"no layer table found in {ARCHITECTURE}"
    names = set(modules())
    assert sorted(n for n in names if layer_of(n, table) is None) == []
    assert sorted(e for e in table if e not in names) == [], "table entries that name no module or package"


def test_no_module_imports_a_higher_layer():
    table = layer_table()
    upward = [f"{m} (layer {layer_of(m, table)}) imports {d} (layer {layer_of(d, table)})"
              for m, deps in import_graph().items() for d in sorted(deps)
              if layer_of(d, table) > layer_of(m, table)]
    assert upward == []


def test_every_folder_sits_on_one_layer():
    """The table names whole folders (a room's modules share its layer), so the folder picture is the table's."""
    table = layer_table()
    split = [f"{m} (layer {layer_of(m, table)}) in {room_of(m)} (layer {layer_of(room_of(m), table)})"
             for m in sorted(modules()) if layer_of(m, table) != layer_of(room_of(m), table)]
    assert split == []


def test_no_folder_imports_a_higher_folder():
    """Folders as rooms, imports as arrows: none runs up the layer table, and no rooms import each other."""
    table = layer_table()
    graph = folder_graph()
    upward = [f"{room} (layer {layer_of(room, table)}) imports {dep} (layer {layer_of(dep, table)}): "
              f"{module} imports {imported}"
              for room, arrows in graph.items() for dep, (module, imported) in arrows.items()
              if layer_of(dep, table) > layer_of(room, table)]
    assert upward == []
    assert strongly_connected({room: set(arrows) for room, arrows in graph.items()}) == []


@pytest.mark.parametrize("low, high", [("wpultr.errors", "wpultr.config"), ("wpultr.config", "wpultr.bal.method"),
                                       ("wpultr.causal.discovery", "wpultr.bal.method"),
                                       ("wpultr.bal.method", "wpultr.pipeline.stages"),
                                       ("wpultr.pipeline.runner", "wpultr.experiment.harness"),
                                       ("wpultr.experiment.harness", "wpultr.cli"),
                                       ("wpultr.methods.base", "wpultr.bal.method"),
                                       ("wpultr.settings.bal", "wpultr.config"),
                                       ("wpultr.rundir.layout", "wpultr.io.tables")])
def test_the_table_puts_the_flow_in_order(low, high):
    """The direction the document describes: errors < run directory < settings < config < causal < methods < BAL
    < pipeline < experiment < cli."""
    table = layer_table()
    assert layer_of(low, table) < layer_of(high, table)
