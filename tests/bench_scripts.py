"""Load a bench/ script as a module in tests, as it runs as a script: with bench/ on the path for its siblings
(bench/seed_tables.py), which is taken off again afterwards."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench_script(name: str) -> ModuleType:
    """bench/<name>.py as a fresh module (its sibling imports resolved while it loads), registered under `name` in
    sys.modules while it runs, as a script's __main__ is (dataclasses look their module up there)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module
