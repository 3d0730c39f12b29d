"""bench/ingest.py --format embeddings on a tiny generated set: its measured children read every session of both
stored forms, the cost breakdown times each step, and files it did not write are never deleted."""
from __future__ import annotations

import pytest

from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("ingest")


def test_the_embedding_children_read_every_session_and_time_each_step(tmp_path, bench):
    manifest = bench.build_embedding_files(tmp_path, 40, 2)
    root = tmp_path / "embeddings"
    assert bench.build_embedding_files(tmp_path, 40, 2) == manifest           # reused, not rebuilt
    for pattern in ("parts/*.feather", "clicks/*.parquet"):
        paths = sorted(str(p) for p in root.glob(pattern))
        assert len(paths) == 2
        ours = bench._child_ours_embeddings({"workers": 0, "paths": paths, "out": str(tmp_path / "out")})
        assert (ours["sessions"], ours["results"], ours["quarantined"]) == (40, manifest["results"], 0)
        assert ours["parquet_bytes"] > 0 and ours["idle_cpu_per_second"] == 0.0
        arrow = bench._child_arrow({"paths": paths})
        assert arrow["rows"] == (manifest["results"] if pattern.startswith("parts") else 40)
    paths = sorted(str(p) for p in root.glob("parts/*.feather"))
    costs = bench._child_embedding_costs({"paths": paths, "out": str(tmp_path / "costs")})["costs"]
    assert list(costs) == list(bench.COST_STEPS)
    assert all(seconds >= 0 for seconds in costs.values()) and costs["write the features column"] > 0
    assert costs["read, check and convert (ours)"] > 0


def test_an_embeddings_folder_it_did_not_write_is_kept(tmp_path, bench):
    mine = tmp_path / "embeddings" / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("the user's")
    with pytest.raises(SystemExit, match="not written by bench/ingest.py"):
        bench.build_embedding_files(tmp_path, 40, 2)
    assert mine.read_text() == "the user's"
