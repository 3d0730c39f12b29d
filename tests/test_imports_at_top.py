"""Imports at the top (issue 46 item 6): a function-level import in wpultr/ names its reason on the same line,
`# lazy: <measured start-up cost>` (a heavy package the quick commands must not load; docs/development.md,
"Lazy imports", and tests/test_startup.py) or `# local: <reason>`; and none re-imports a name the module already
binds at its top."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "wpultr"



def _bindings(node: ast.Import | ast.ImportFrom) -> dict[str, tuple]:
    if isinstance(node, ast.Import):
        return {(a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0],) for a in node.names}
    return {(a.asname or a.name): (node.level, node.module, a.name) for a in node.names}


def function_level_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, source line, re-imports a top-level binding) of every import inside a function of `path`."""
    text = path.read_text(encoding="utf-8")
    tree, lines = ast.parse(text), text.splitlines()
    top: dict[str, tuple] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            top.update(_bindings(node))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                again = all(top.get(k) == v for k, v in _bindings(child).items())
                found.append((child.lineno, lines[child.lineno - 1].strip(), again))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_function_level_import_names_its_reason():
    bare = [f"{p.relative_to(ROOT)}:{line}: {src}" for p in _modules()
            for line, src, _ in function_level_imports(p) if "# lazy:" not in src and "# local:" not in src]
    assert not bare, "move these imports to the top, or name the start-up reason (# lazy: ...):\n" + "\n".join(bare)


def test_no_function_re_imports_what_its_module_imports_at_the_top():
    again = [f"{p.relative_to(ROOT)}:{line}: {src}" for p in _modules()
              for line, src, dup in function_level_imports(p) if dup]
    assert not again, "\n".join(again)


def test_the_check_sees_a_bare_import_and_a_re_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import json\n\n\ndef f():\n    import json\n    import torch  # lazy: +3 s\n"
                      "    import csv\n")
    assert function_level_imports(module) == [(5, "import json", True), (6, "import torch  # lazy: +3 s", False),
                                              (7, "import csv", False)]
