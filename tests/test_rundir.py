"""Run-directory writes are atomic, completion records drive resume, and --fresh deletes only a run."""
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.errors import RunDirError
from wpultr.rundir.files import MARKER, RunDir, atomic_path, is_run_dir, package_versions, read_json, write_json


def test_atomic_write_leaves_old_file_when_writer_fails(tmp_path):
    target = RunDir.create(tmp_path).path("a.json")    # a run's own file: replaced in place
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half written")
        raise RuntimeError("killed mid-write")
    assert read_json(target) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".wpultr-run", "a.json"]


def test_atomic_directory_replace(tmp_path):
    target = RunDir.create(tmp_path).path("ranker")   # a directory is replaced inside a run directory
    for version in ("1", "2"):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "v").write_text(version)
    assert (target / "v").read_text() == "2"


def test_stage_is_done_only_with_record_and_outputs(tmp_path):
    run = RunDir(tmp_path)
    assert not run.is_done("ingest", ["data/x"])
    run.mark_done("ingest", ["data/x"], 1.0)
    assert not run.is_done("ingest", ["data/x"])  # output missing
    run.path("data").mkdir()
    run.path("data/x").write_text("")
    assert run.is_done("ingest", ["data/x"])


def test_versions_name_the_packages_behind_the_numbers():
    """Each version is the installed one (importlib.metadata, the module's own __version__), and every package
    wpultr requires is named — LightGBM's and numba's too, which a hand-kept list once left out."""
    import platform
    import re
    from importlib import metadata

    import numpy
    import torch
    versions = package_versions()
    assert versions["python"] == platform.python_version()
    assert versions["numpy"] == numpy.__version__ and versions["torch"] == torch.__version__
    required = [re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group(0) for r in metadata.requires("wpultr")
                if "extra ==" not in r]
    assert {"lightgbm", "numba", "causal-learn", "transformers"} <= set(required)
    for name in ["wpultr", *required]:
        assert versions.get(name) == metadata.version(name), name


# --------------------------------------------------------------------------------------------- safety
# Issue 15 items 1-2: a hostile or mistaken name, run_dir or --fresh never deletes or writes outside
# a run directory. Every probe runs the real CLI in a throw-away project and checks that its sentinel
# files survive.
@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project directory (the working directory) with a config, a run root and sentinel files."""
    root = tmp_path / "project"
    (root / "pipelines").mkdir(parents=True)
    (root / "pipelines" / "demo.yaml").write_text("name: demo\nrun_dir: runs/{name}\ntrain: {epochs: 1}\n")
    RunDir.create(root / "runs" / "other")                 # another run, beside the one the probes name
    for sentinel in ("keep.txt", "runs/other/keep.txt", "pipelines/keep.txt"):
        (root / sentinel).write_text("precious")
    (tmp_path / "outside.txt").write_text("precious")
    monkeypatch.chdir(root)
    return root


def _files(tmp_path: Path) -> set[str]:
    return {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}


def _run(*args: str):
    return CliRunner().invoke(app, ["run", "pipelines/demo.yaml", *args])


@pytest.mark.parametrize("sets, message", [
    (["name=.."], "name: must be one path component"),
    (["name=''"], "name: must be one path component"),
    (["name="], "name: expected a string"),
    (["name=../../somewhere"], "name: must be one path component"),
    (["name=a/b"], "name: must be one path component"),
    (["run_dir=.."], "holds"),                               # the project: holds the working directory
    (["run_dir=."], "holds"),
    (["run_dir=runs"], f"holds no wpultr run (no {MARKER} marker)"),   # the run root
    (["run_dir=pipelines"], "pipelines: holds"),             # holds the config file (marker planted below)
    (["run_dir=runs/other/keep.txt"], "file"),
])
def test_fresh_with_hostile_names_and_run_dirs_deletes_and_writes_nothing(project, sets, message):
    (project / "pipelines" / MARKER).write_text('{"wpultr_run": 1}')   # even a marker does not expose the config
    before = _files(project.parent)
    result = _run("--fresh", *[a for s in sets for a in ("--set", s)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "\n" not in result.output.strip()   # one line, no traceback
    assert _files(project.parent) == before
    for sentinel in ("keep.txt", "runs/other/keep.txt", "pipelines/keep.txt"):
        assert (project / sentinel).read_text() == "precious"


def test_a_run_dir_that_is_not_a_run_is_never_written_to(project):
    before = _files(project.parent)
    result = _run("--set", "run_dir=runs/other/..")             # a non-empty directory without a marker
    assert result.exit_code == 2 and "holds no wpultr run" in result.output, result.output
    assert _files(project.parent) == before


def test_fresh_removes_only_a_marked_run_directory(tmp_path):
    run = RunDir.create(tmp_path / "runs" / "a")
    assert is_run_dir(run.root) and read_json(run.path(MARKER))["wpultr_run"] == 1
    run.path("data").mkdir()
    run.path("data", "x").write_text("")
    assert RunDir.remove_fresh(run.root) and not run.root.exists()
    assert (tmp_path / "runs").is_dir()
    assert RunDir.remove_fresh(tmp_path / "runs" / "a") is False     # nothing to delete


def test_fresh_refuses_unmarked_nested_linked_and_home_directories(tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "keep.txt").write_text("precious")
    outer = RunDir.create(tmp_path / "outer")
    RunDir.create(outer.path("inner"))
    link = tmp_path / "link"
    link.symlink_to(outer.root)
    home = RunDir.create(tmp_path / "home")
    home.path("keep.txt").write_text("precious")
    monkeypatch.setenv("HOME", str(home.root))
    for target, message in ((plain, "holds no wpultr run"), (outer.root, "holds another run"),
                            (link, "symlink"), (home.root, "home directory")):
        with pytest.raises(RunDirError, match=message):
            RunDir.remove_fresh(target)
    assert (plain / "keep.txt").exists() and outer.path("inner", MARKER).exists() and home.path("keep.txt").exists()


def test_a_run_written_before_markers_is_adopted_but_no_other_directory(tmp_path):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "config.yaml").write_text("name: legacy\n")
    write_json(legacy / "versions.json", package_versions())
    assert is_run_dir(RunDir.create(legacy).root)
    (legacy / MARKER).unlink()                                  # --fresh (make demo) on an old run
    assert RunDir.remove_fresh(legacy) and not legacy.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.yaml").write_text("mine")
    with pytest.raises(RunDirError, match="not empty and holds no wpultr run"):
        RunDir.create(other)
    assert not (other / MARKER).exists()


# Issue 29 item 2: a run_dir spelled through a directory that does not exist yet ('victim/{name}/..') is checked
# as the directory it names (victim, not empty, not a run): nothing is written there, and --fresh empties nothing.
def test_create_and_fresh_check_the_final_path_not_its_spelling(tmp_path):
    from wpultr.config import config_from_dict
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    spelled = victim / "zz" / ".."
    with pytest.raises(RunDirError, match="holds no wpultr run"):
        RunDir.create(spelled)
    with pytest.raises(RunDirError, match="holds no wpultr run"):
        RunDir.remove_fresh(spelled)
    assert _files(victim) == {"keep.txt"}
    assert config_from_dict({"name": "zz", "run_dir": str(victim) + "/{name}/.."}).resolved_run_dir == victim


@pytest.mark.parametrize("fresh", [[], ["--fresh"]])
def test_a_run_dir_through_a_new_directory_into_a_foreign_one_is_refused(project, fresh):
    victim = project / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    before = _files(project.parent)
    result = _run(*fresh, "--set", f"run_dir={victim}/{{name}}/..", "--set", "name=zz")
    assert result.exit_code == 2 and "holds no wpultr run" in result.output, result.output
    assert "\n" not in result.output.strip()
    assert _files(project.parent) == before
