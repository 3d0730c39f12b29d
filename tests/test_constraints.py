"""constraints.txt (tools/constraints.py, `make install`'s pins): every dependency pyproject.toml names — the test
extra's too — is pinned there at a version its range allows, torch at the CPU build 2.13.0, and the Makefile's
install uses it while `make test-latest` does not."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")
ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert name and version, f"constraints.txt: {line!r} is not name==version"
            out[canonicalize_name(name)] = Version(version)
    return out


def test_every_dependency_is_pinned_inside_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = pins()
    for line in project["dependencies"] + project["optional-dependencies"]["test"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is not in constraints.txt: run `make constraints`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (name, str(pinned[name]), line)
    assert pinned["torch"] == Version("2.13.0") and "wpultr" not in pinned


def test_make_install_uses_the_pins_and_test_latest_does_not():
    makefile = (ROOT / "Makefile").read_text()
    stamp = makefile.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"pip install .*-c \$\(CONSTRAINTS\) torch==2\.13\.0", stamp)
    assert re.search(r"pip install .*-c \$\(CONSTRAINTS\) -e '\.\[test\]'", stamp)
    latest = makefile.split("\ntest-latest:", 1)[1].split("\n\n", 1)[0]
    assert "$(LATEST)/bin/python -m pytest" in latest and "-c " not in latest and "torch==2.13.0" in latest
