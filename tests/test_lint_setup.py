"""The linter in CI: `make test` (CI's command) runs the ruff pinned in the test extra before pytest, so a lint error
fails CI, and the installed ruff is that pin (another release may flag other things)."""
from __future__ import annotations

import re
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff_pin() -> str:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^test = \[(.*?)\]", pyproject, re.M | re.S)
    assert extra, "pyproject.toml has no `test` optional extra"
    pin = re.search(r'"ruff==([0-9][0-9.]*)"', extra.group(1))
    assert pin, "the `test` extra does not pin ruff (ruff==X.Y.Z)"
    return pin.group(1)


def _planned(target: str) -> list[str]:
    """The commands `make <target>` would run, in order (make -n runs none of them)."""
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_runs_the_pinned_ruff_before_pytest():
    assert version("ruff") == _ruff_pin()
    commands = _planned("test")
    lint = [i for i, c in enumerate(commands) if re.search(r"/ruff check\b", c)]
    tests = [i for i, c in enumerate(commands) if "-m pytest" in c]
    assert lint and tests and lint[0] < tests[0], commands
    assert any(re.search(r'-m pytest -q -m "not e2e"', c) for c in _planned("test-unit"))
    assert any(re.search(r"/ruff check\b", c) for c in _planned("lint"))
