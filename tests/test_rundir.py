"""Run-directory writes are atomic and completion records drive resume."""
import pytest

from wpultr.pipeline.rundir import RunDir, atomic_path, package_versions, read_json, write_json


def test_atomic_write_leaves_old_file_when_writer_fails(tmp_path):
    target = tmp_path / "a.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half written")
            raise RuntimeError("killed mid-write")
    assert read_json(target) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_atomic_directory_replace(tmp_path):
    target = tmp_path / "ranker"
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
    versions = package_versions()
    for name in ("python", "numpy", "torch", "dask", "causal-learn", "transformers", "wpultr"):
        assert versions[name], name
