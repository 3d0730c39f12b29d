"""fsspec URLs for data.* and run_dir (wpultr.storage): inputs read through fsspec, a URL run directory
synced from its local working copy after every stage, resume from the synced copy, protocol errors."""
import gzip
import json
import shutil
import uuid

import fsspec
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from wpultr import storage
from wpultr.cli import app
from wpultr.config import ConfigError, config_from_dict, load_config
from wpultr.errors import RunDirError
from wpultr.io.baidu import read_baidu_annotations
from wpultr.io.tables import read_annotations_table
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import STAGES, Stage
from wpultr.rundir.layout import INGEST_SUMMARY, MARKER, SPLIT
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = {"n_queries": 20, "n_sessions": 120, "n_annotated_queries": 10}


@pytest.fixture
def memory_url():
    """A fresh memory:// prefix, removed afterwards (the memory filesystem is one per process)."""
    url = f"memory://wpultr-test-{uuid.uuid4().hex[:8]}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url[len("memory://"):]):
        fs.rm(url[len("memory://"):], recursive=True)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Working copies of URL run directories under tmp_path (storage.WORKDIR_ENV)."""
    root = tmp_path / "workdir"
    monkeypatch.setenv(storage.WORKDIR_ENV, str(root))
    return root


def _remote(url: str) -> tuple:
    return storage.filesystem(url)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def test_inputs_globbed_and_opened_through_fsspec(memory_url):
    fs, root = _remote(memory_url)
    fs.pipe_file(f"{root}/logs/b.csv.gz", gzip.compress(b"x\n2\n"))
    fs.pipe_file(f"{root}/logs/a.csv.gz", gzip.compress(b"x\n1\n"))
    fs.pipe_file(f"{root}/logs/notes.txt", b"-")
    found = storage.expand(f"{memory_url}/logs/*.csv.gz")
    assert found == [fs.unstrip_protocol(f"{root}/logs/{n}") for n in ("a.csv.gz", "b.csv.gz")]   # sorted URLs
    assert storage.expand(f"{memory_url}/logs/missing.csv") == []
    with storage.open_input(found[1], compression="infer") as f:    # .gz decompressed by name
        assert f.read() == b"x\n2\n"
    with storage.open_input(found[1]) as f:                          # raw bytes as stored
        assert f.read(2) == b"\x1f\x8b"
    assert storage.is_file(found[0]) and not storage.is_file(f"{memory_url}/logs")
    assert storage.size(found[0]) == len(gzip.compress(b"x\n1\n"))


def test_tables_read_from_a_url_as_from_a_path(tmp_path, memory_url):
    logs = simulate(SimulateConfig(**SIM), seed=1)
    logs.write(tmp_path / "sim", fmt="parquet")
    local = tmp_path / "sim" / "annotations.parquet"
    fs, root = _remote(memory_url)
    fs.put_file(str(local), f"{root}/annotations.parquet")
    from_url = read_annotations_table(f"{memory_url}/annotations.parquet")
    pd.testing.assert_frame_equal(from_url, read_annotations_table(local))
    with pytest.raises(FileNotFoundError, match=f"{memory_url}/none.parquet: no such table file"):
        read_annotations_table(f"{memory_url}/none.parquet")


def test_baidu_annotations_read_from_a_url_as_from_a_path(tmp_path, memory_url):
    simulate(SimulateConfig(**SIM), seed=1).write(tmp_path / "sim", fmt="baidu")
    local = tmp_path / "sim" / "annotations.tsv.gz"
    fs, root = _remote(memory_url)
    fs.put_file(str(local), f"{root}/annotations.tsv.gz")
    rows, bad = read_baidu_annotations(f"{memory_url}/annotations.tsv.gz")
    expected, expected_bad = read_baidu_annotations(local)
    assert len(rows) > 0 and len(bad) == len(expected_bad) == 0
    pd.testing.assert_frame_equal(rows, expected)


def test_atomic_write_on_a_file_url_leaves_no_temporary(tmp_path):
    from wpultr.rundir.files import RunDir
    RunDir.create(tmp_path / "out")       # replaced in place: a run's own file (outside a run it needs a manifest)
    url = (tmp_path / "out" / "a.json").as_uri()
    storage.write_bytes(url, b"1")
    storage.write_bytes(url, b"22")
    assert (tmp_path / "out" / "a.json").read_bytes() == b"22"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".wpultr-run", "a.json"]


# ---------------------------------------------------------------------------------------------
# A run directory at a URL: its working copy
# ---------------------------------------------------------------------------------------------
def test_push_and_pull_mirror_changes_between_two_working_copies(tmp_path, memory_url):
    """Two machines' working copies of one URL: new, changed and deleted files travel both ways."""
    client, worker = storage.WorkingCopy(memory_url, tmp_path / "a"), storage.WorkingCopy(memory_url, tmp_path / "b")
    (client.local / "stages").mkdir(parents=True)
    (client.local / "stages" / "ingest.json").write_text("{}")
    (client.local / "ranker").mkdir()
    (client.local / "ranker" / "old.bin").write_bytes(b"old")
    (client.local / ".x.tmp-1").write_text("a write in progress")
    assert client.push() == 2                                  # no temporary, no manifest
    assert client.push() == 0                                  # nothing changed since
    assert worker.pull() == 2 and (worker.local / "ranker" / "old.bin").read_bytes() == b"old"
    # the worker writes a partition (storage._push_here runs this on a remote worker); the client takes it
    (worker.local / "data").mkdir()
    (worker.local / "data" / "part-0.parquet").write_bytes(b"p")
    assert storage._push_here(memory_url, str(worker.local)) == 1
    assert client.pull() == 1 and (client.local / "data" / "part-0.parquet").read_bytes() == b"p"
    # the client replaces the ranker: the old file goes at the URL and, on the next pull, at the worker
    shutil.rmtree(client.local / "ranker")
    (client.local / "ranker").mkdir()
    (client.local / "ranker" / "new.bin").write_bytes(b"new")
    assert client.pull() == 0 and not (client.local / "ranker" / "old.bin").exists()   # a local deletion stays
    client.push()
    assert storage._pull_here(memory_url, str(worker.local)) == 1
    assert not (worker.local / "ranker" / "old.bin").exists() and (worker.local / "ranker" / "new.bin").exists()
    fs, root = _remote(memory_url)
    assert sorted(p[len(root) + 1:] for p in fs.find(root)) == ["data/part-0.parquet", "ranker/new.bin",
                                                                "stages/ingest.json"]


@pytest.mark.e2e
def test_workers_on_another_host_pull_and_push_their_own_copy(tmp_path, dask_client, monkeypatch):
    """The client.run plumbing on real worker processes, as if they ran on another host: they fill their
    copy from the URL before a stage and send what a task wrote there after it."""
    url = (tmp_path / "bucket" / "run").as_uri()
    client_copy = storage.WorkingCopy(url, tmp_path / "client")
    (client_copy.local / "data").mkdir(parents=True)
    (client_copy.local / "data" / "split.json").write_text("{}")
    client_copy.push()
    monkeypatch.setattr(storage, "_host", lambda: "the-client-host")     # on this process only
    workers = storage.WorkingCopy(url, tmp_path / "worker")                # the workers' copy path
    workers.pull_on_workers(dask_client)
    assert (workers.local / "data" / "split.json").read_text() == "{}"
    (workers.local / "data" / "part-0.parquet").write_bytes(b"p")         # what a task wrote there
    workers.push_from_workers(dask_client)
    assert client_copy.pull() == 1 and (client_copy.local / "data" / "part-0.parquet").read_bytes() == b"p"
    assert storage.WorkingCopy("memory://x")._remote_workers(dask_client) == []   # memory:// stays in-process


def test_the_records_named_last_are_uploaded_after_everything_else(tmp_path, memory_url, monkeypatch):
    copy = storage.WorkingCopy(memory_url, tmp_path / "a")
    for rel in ("stages/split.json", "data/split.json", "z.json"):
        (copy.local / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy.local / rel).write_text(rel)
    order = []
    put = storage.WorkingCopy._put
    monkeypatch.setattr(storage.WorkingCopy, "_put",
                        lambda self, source, remote: (order.append(remote), put(self, source, remote)))
    copy.push(last=("stages/split.json",))
    assert [o.rsplit("/", 2)[-2:] for o in order][-1] == ["stages", "split.json"] and len(order) == 3


def test_pull_and_fresh_refuse_a_url_that_holds_no_run(tmp_path, memory_url):
    fs, root = _remote(memory_url)
    fs.pipe_file(f"{root}/precious.csv", b"1")
    copy = storage.WorkingCopy(memory_url, tmp_path / "a")
    with pytest.raises(RunDirError, match="holds no wpultr run"):
        copy.pull(marker=MARKER)
    with pytest.raises(RunDirError, match="--fresh will not delete it"):
        copy.remove(marker=MARKER)
    assert fs.exists(f"{root}/precious.csv")


def test_working_copy_dir_is_one_per_url(workdir):
    a, b = storage.working_copy_dir("s3://bucket/runs/a"), storage.working_copy_dir("gs://bucket/runs/a")
    assert a != b and a.parent == b.parent == workdir and a.name.startswith("a-")
    assert storage.working_copy_dir("s3://bucket/runs/a/") == a


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values, key", [
    ({"run_dir": "nosuch://bucket/{name}"}, "run_dir"),
    ({"data": {"source": "parquet", "train": ["nosuch://bucket/*.parquet"]}}, "data.train"),
    ({"data": {"source": "parquet", "train": ["x.parquet"], "annotations": "nosuch://a.parquet"}},
     "data.annotations"),
])
def test_an_unknown_protocol_names_the_key_and_the_protocols(values, key):
    with pytest.raises(ConfigError, match=rf"^{key}: unknown storage protocol 'nosuch' .*allowed protocols: .*memory"):
        config_from_dict(values)


def test_a_protocol_without_its_package_names_the_package():
    try:
        import s3fs  # noqa: F401
        pytest.skip("s3fs is installed here")
    except ImportError:
        pass
    with pytest.raises(ConfigError, match=r"^run_dir: protocol 's3' .*pip install s3fs"):
        config_from_dict({"run_dir": "s3://bucket/runs/{name}"})


def test_urls_in_a_config_file_are_kept_as_written(tmp_path, workdir):
    config = tmp_path / "conf" / "run.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump({"name": "r", "run_dir": "memory://runs/{name}",
                                      "data": {"source": "parquet", "train": ["file:///logs/*.parquet", "rel.csv"],
                                               "annotations": "memory://a.parquet"}}))
    cfg = load_config(config)
    assert cfg.data.train == ["file:///logs/*.parquet", str(tmp_path / "conf" / "rel.csv")]
    assert cfg.data.annotations == "memory://a.parquet" and cfg.run_dir_url == "memory://runs/r"
    assert cfg.resolved_run_dir == storage.working_copy_dir("memory://runs/r")


# ---------------------------------------------------------------------------------------------
# Whole runs
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_wpultr_run_reads_and_writes_file_urls(tmp_path, workdir, dask_client):
    """`wpultr run` on a process cluster with data.train, data.annotations and run_dir as file:// URLs."""
    simulate(SimulateConfig(**SIM), seed=2).write(tmp_path / "sim", fmt="parquet", sessions_per_file=50)
    logs, out = (tmp_path / "sim").as_uri(), tmp_path / "bucket" / "runs"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "url", "seed": 0, "run_dir": out.as_uri() + "/{name}",
        "data": {"source": "parquet", "train": [logs + "/train/part-*.parquet"],
                 "annotations": logs + "/annotations.parquet", "valid_fraction": 0.3},
        "ranker": {"backbone": "mlp", "head": [8]}, "train": {"epochs": 1, "batch_size": 64},
        "evaluation": {"discover_graph": False},
        "cluster": {"scheduler": dask_client.scheduler.address}}))
    result = CliRunner().invoke(app, ["run", str(config)])
    assert result.exit_code == 0, result.output
    remote, local = out / "url", storage.working_copy_dir(out.as_uri() + "/url")
    assert f"run directory: {local}" in result.output
    for stage in STAGES:                                  # every stage synced with its completion record
        assert (remote / "stages" / f"{stage.name}.json").is_file(), stage.name
    ingest = json.loads((remote / INGEST_SUMMARY).read_text())
    assert ingest["files"] == 3 and ingest["sessions"] == SIM["n_sessions"]
    for rel in ("metrics.json", "report.html", "ranker/model.safetensors", "config.yaml", MARKER):
        assert (remote / rel).read_bytes() == (local / rel).read_bytes(), rel
    assert not list(remote.rglob("*.tmp-*")) and not (remote / storage.SYNC_MANIFEST).exists()
    assert yaml.safe_load((remote / "config.yaml").read_text())["run_dir"] == out.as_uri() + "/{name}"


@pytest.mark.e2e
def test_resume_after_a_failed_stage_pulls_the_synced_copy(memory_url, workdir, dask_client):
    """A run at a memory:// URL fails in a stage; its working copy is lost (another machine resumes); the
    resume pulls the finished stages and re-runs from the first stage whose record never reached the URL."""
    cfg = config_from_dict({"name": "resume", "seed": 1, "run_dir": memory_url + "/{name}",
                            "data": {"source": "simulate", "simulate": SIM}})
    first = [s for s in STAGES if s.name in ("ingest", "featurize", "preprocess", "split")]

    def dies(ctx):
        raise RuntimeError("worker lost mid-training")

    with pytest.raises(RuntimeError, match="worker lost"):
        run_pipeline(cfg, client=dask_client, stages=(*first, Stage("train", dies, lambda c: [])))
    fs, root = _remote(cfg.run_dir_url)
    assert fs.exists(f"{root}/stages/split.json") and fs.exists(f"{root}/stages/train.failed")
    assert not fs.exists(f"{root}/stages/train.json")
    ingest_record = fs.cat_file(f"{root}/stages/ingest.json")
    fs.rm_file(f"{root}/stages/split.json")            # as if the upload was cut before split's record
    shutil.rmtree(cfg.resolved_run_dir)                # the working copy is gone: only the URL remains

    seen = {}

    def trains(ctx):
        seen["split"] = json.loads(ctx.run.path(SPLIT).read_text())
        return {}

    result = run_pipeline(cfg, client=dask_client, stages=(*first, Stage("train", trains, lambda c: [])))
    assert result.skipped == ["ingest", "featurize", "preprocess"] and result.ran == ["split", "train"]
    assert result.url == cfg.run_dir_url and result.run_dir == cfg.resolved_run_dir
    assert fs.cat_file(f"{root}/stages/ingest.json") == ingest_record               # not redone
    assert seen["split"]["test_queries"] and fs.exists(f"{root}/stages/train.json")
    assert not fs.exists(f"{root}/stages/train.failed")


@pytest.mark.e2e
def test_status_at_the_url_shows_the_stage_that_is_running(memory_url, workdir, dask_client):
    """The runner pushes a stage's running record when it starts, so `status` of the URL, read from another
    working copy while the stage runs, says running; once it finishes the record is gone there too."""
    from wpultr.pipeline.status import status_of
    cfg = config_from_dict({"name": "live", "seed": 1, "run_dir": memory_url + "/{name}"})
    seen = {}

    def stage(name):
        def run(ctx):
            found = status_of(cfg.run_dir_url).to_dict()
            seen[name] = {s["name"]: s["state"] for s in found["stages"]}
            return {}
        return Stage(name, run, lambda c: [])

    run_pipeline(cfg, client=dask_client, stages=(stage("ingest"), stage("train")))
    assert seen["ingest"]["ingest"] == "running"
    assert seen["train"]["ingest"] == "done" and seen["train"]["train"] == "running"
    after = {s["name"]: s["state"] for s in status_of(cfg.run_dir_url).to_dict()["stages"]}
    assert after["ingest"] == "done" and after["train"] == "done"
