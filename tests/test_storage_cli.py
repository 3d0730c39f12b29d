"""The commands that read a run directory, given it as an fsspec URL (storage.readable_run_dir).

One real finished run (simulated logs, the MLP, the graph under its scores) is uploaded to a file:// URL in
another directory and to a memory:// URL; `wpultr evaluate`, `export` (then `score`), `status`, `graph show`/
`diff` and `identifiability check` must print for the URL what they print for the local directory. A URL's
files are read as they are at each call; an unknown protocol names the argument; a URL without a run is
one error line naming the URL and what is missing.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pandas as pd
import pytest
from typer.testing import CliRunner

from wpultr import storage
from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.errors import ConfigError
from wpultr.export import EXPORT_FILE
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import STAGES
from wpultr.rundir import layout as L

SIM = {"n_queries": 16, "docs_per_query": 8, "n_sessions": 160, "n_annotated_queries": 10,
       "results_per_page": 6, "n_dense_features": 4}
KINDS = ["file", "memory"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.output


def fails(*args: str) -> str:
    """The one error line of a command that must fail as a user error (exit code 2, no traceback)."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.startswith("error: "), result.output
    return result.output.strip()


def upload(local: Path, url: str, skip: tuple[str, ...] = ()) -> None:
    """Put every file of `local` at `url` as a finished run at a URL holds them (`skip`: relative paths left out)."""
    for path in sorted(local.rglob("*")):
        rel = path.relative_to(local).as_posix()
        if path.is_file() and rel not in skip:
            storage.write_bytes(f"{url}/{rel}", path.read_bytes())


def memory_url() -> str:
    return f"memory://wpultr-cli-{uuid.uuid4().hex[:8]}/run"


@pytest.fixture(scope="module", autouse=True)
def workdir(tmp_path_factory):
    """Reader copies of URL run directories under the test's temporary directory (storage.WORKDIR_ENV)."""
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("workdir")
        patch.setenv(storage.WORKDIR_ENV, str(root))
        yield root


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, dask_client, one_torch_thread) -> Path:
    """A real finished run in a local directory, with the click graph under its ranker's scores (epoch_0)."""
    tmp = tmp_path_factory.mktemp("runs")
    cfg = config_from_dict({
        "name": "sim", "seed": 1, "run_dir": str(tmp / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3, "simulate": SIM},
        "ranker": {"backbone": "mlp", "head": [8]}, "train": {"epochs": 1, "batch_size": 64},
        "discovery": {"n_sessions": 80, "n_bootstrap": 1}})
    result = run_pipeline(cfg, client=dask_client)
    assert (result.run_dir / "epoch_0" / "graph.json").is_file()
    return result.run_dir


@pytest.fixture(scope="module", params=KINDS)
def run_url(request, local_run, tmp_path_factory) -> str:
    """The finished run at a file:// URL (another directory) or a memory:// URL."""
    url = ((tmp_path_factory.mktemp("bucket") / "runs" / "sim").as_uri() if request.param == "file"
           else memory_url())
    upload(local_run, url)
    yield url
    if request.param == "memory":
        fs, root = storage.filesystem(url)
        fs.rm(root.rsplit("/", 1)[0], recursive=True)


# ---------------------------------------------------------------------------------------------
# A finished run at a URL reads as the local one
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_evaluate_a_url_run_prints_what_the_local_run_prints(local_run, run_url):
    assert json.loads(ok("evaluate", run_url, "--json")) == json.loads(ok("evaluate", str(local_run), "--json"))
    annotations = str(local_run / L.ANNOTATIONS)
    mine = json.loads(ok("evaluate", run_url + "/", "--annotations", annotations, "--json"))   # trailing /: same run
    assert mine == json.loads(ok("evaluate", str(local_run), "--annotations", annotations, "--json"))
    assert mine["all"]["n_queries"] > 0
    copy = storage.reader_copy_dir(run_url)
    if run_url.startswith("memory://"):   # only what evaluate reads was pulled: no sessions in the reader copy
        assert (copy / L.RANKER_DIR / "model.safetensors").is_file() and not (copy / L.SESSIONS_DIR).exists()
    else:                                 # a file:// URL is read in place
        assert not copy.exists()
    assert not storage.working_copy_dir(run_url).exists()   # a reader never writes into a run's working copy


@pytest.mark.e2e
def test_export_from_a_url_scores_as_the_export_of_the_local_run(local_run, run_url, tmp_path):
    ok("export", str(local_run), "--out", str(tmp_path / "from_local"))
    assert ok("export", run_url, "--out", str(tmp_path / "from_url")).strip().splitlines()[-1] == \
        f"exported ranker: {tmp_path / 'from_url'}"
    manifest = json.loads((tmp_path / "from_url" / EXPORT_FILE).read_text())
    assert manifest["source_run"] == run_url and manifest["method"] == "naive"
    # to a URL: staged locally, checked, uploaded; a file:// URL's files are a local directory to score
    out_dir = tmp_path / "bucket" / "model"
    lines = ok("export", run_url, "--out", out_dir.as_uri()).strip().splitlines()
    assert lines[-1] == f"exported ranker: {out_dir.as_uri()}" and lines[0].startswith("shipped: naive epoch 0")
    annotations = str(local_run / L.ANNOTATIONS)
    scores = {}
    for name, model in (("local", tmp_path / "from_local"), ("url", tmp_path / "from_url"), ("uploaded", out_dir)):
        ok("score", str(model), annotations, "--out", str(tmp_path / f"{name}.parquet"))
        scores[name] = pd.read_parquet(tmp_path / f"{name}.parquet")
    assert len(scores["local"]) > 0
    pd.testing.assert_frame_equal(scores["url"], scores["local"])
    pd.testing.assert_frame_equal(scores["uploaded"], scores["local"])
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(p.name for p in (tmp_path / "from_url").iterdir())


@pytest.mark.e2e
def test_status_of_a_url_run_is_the_local_runs_status(local_run, run_url):
    mine, theirs = json.loads(ok("status", run_url, "--json")), json.loads(ok("status", str(local_run), "--json"))
    assert mine.pop("path") == run_url and theirs.pop("path") == str(local_run)
    assert mine == theirs and mine["state"] == "finished" and mine["done"] == len(STAGES)
    text = ok("status", run_url)
    assert text.splitlines()[0] == f"run {run_url} (sim): finished, {len(STAGES)} of {len(STAGES)} stages done"
    assert text.splitlines()[1:] == ok("status", str(local_run)).splitlines()[1:]


@pytest.mark.e2e
def test_graph_show_and_diff_of_a_url_run(local_run, run_url, tmp_path):
    shown = ok("graph", "show", run_url)
    assert shown == ok("graph", "show", str(local_run)) and shown.startswith("epoch 0\n")
    assert "relevance_score" in shown and "click parents:" in shown
    assert ok("graph", "diff", run_url, "--from", "0", "--to", "0") == "epoch 0 -> epoch 0\nno change\n"
    # --output may be a URL too
    dot = f"{memory_url()}/graph.dot"
    assert ok("graph", "show", run_url, "--format", "dot", "-o", dot).strip() == dot
    with fsspec.open(dot, "rt") as f:
        assert f.read() == ok("graph", "show", str(local_run), "--format", "dot")
    assert fails("graph", "show", run_url, "--epoch", "3") == f"error: {run_url}: epoch 3 has no graph; " \
                                                               f"epochs with a graph: [0]"   # names the URL


@pytest.mark.e2e
def test_identifiability_check_of_a_url_run(local_run, run_url):
    args = ("--factors", "position", "--json")
    mine = json.loads(ok("identifiability", "check", run_url, *args))
    assert mine == json.loads(ok("identifiability", "check", str(local_run), *args)) and mine["n_nodes"] > 1


# ---------------------------------------------------------------------------------------------
# The URL's files as they are now
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_status_follows_the_url_not_an_earlier_pull(local_run):
    """A run still under way at the URL: each `wpultr status` reads the records the URL holds at that moment."""
    url = memory_url()
    late = [f"{L.STAGES_DIR}/{s.name}.json" for s in STAGES[-2:]]
    upload(local_run, url, skip=tuple(late))
    first = json.loads(ok("status", url, "--json"))
    assert first["state"] == "incomplete" and first["done"] == len(STAGES) - 2
    assert [s["state"] for s in first["stages"][-2:]] == ["pending", "pending"]
    upload(local_run, url)                                             # the run finishes
    assert json.loads(ok("status", url, "--json"))["state"] == "finished"
    fs, root = storage.filesystem(url)
    fs.rm_file(f"{root}/{late[-1]}")                                   # a record gone at the URL is gone here too
    assert json.loads(ok("status", url, "--json"))["done"] == len(STAGES) - 1
    fs.rm(root.rsplit("/", 1)[0], recursive=True)


# ---------------------------------------------------------------------------------------------
# Errors: one line each
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, key", [
    (("evaluate", "nosuch://bucket/run"), "RUN_DIR"),
    (("export", "nosuch://bucket/run", "--out", "model"), "RUN_DIR"),
    (("status", "nosuch://bucket/run"), "PATH"),
    (("graph", "show", "nosuch://bucket/run"), "RUN"),
    (("graph", "diff", "nosuch://bucket/run", "--from", "0", "--to", "1"), "RUN"),
    (("identifiability", "check", "nosuch://bucket/run"), "PATH"),
])
def test_an_unknown_protocol_names_the_argument(args, key):
    assert fails(*args).startswith(f"error: {key}: unknown storage protocol 'nosuch' in 'nosuch://bucket/run'; "
                                   f"allowed protocols: ")


def test_export_to_an_unknown_protocol_names_out(tmp_path):
    assert fails("export", str(tmp_path), "--out", "nosuch://b/model").startswith(
        "error: --out: unknown storage protocol 'nosuch'")


@pytest.mark.parametrize("command", [("evaluate", "URL"), ("export", "URL", "--out", "OUT"), ("status", "URL"),
                                     ("graph", "show", "URL"), ("identifiability", "check", "URL")])
def test_a_url_without_a_run_is_one_line_naming_it(command, tmp_path):
    url = memory_url()
    args = [{"URL": url, "OUT": str(tmp_path / "model")}.get(a, a) for a in command]
    assert fails(*args) == f"error: {url}: not a wpultr run directory (nothing is stored there: no {L.MARKER} marker)"
    storage.write_bytes(f"{url}/notes.txt", b"not a run")
    assert fails(*args) == f"error: {url}: not a wpultr run directory (holds files but no {L.MARKER} marker)"
    assert not (tmp_path / "model").exists()


def test_a_url_run_that_has_not_finished_names_the_url_and_what_is_missing(tmp_path):
    url = memory_url()
    storage.write_bytes(f"{url}/{L.MARKER}", b"")
    storage.write_bytes(f"{url}/{L.CONFIG_FILE}", b"name: early\n")
    missing = f"error: {url}: no trained ranker in ranker/ (has the run finished?)"
    assert fails("evaluate", url) == missing and fails("export", url, "--out", str(tmp_path / "model")) == missing
    assert fails("graph", "show", url) == f"error: {url}: no epoch_<k>/graph.json found (has the discover stage run?)"
    status = json.loads(ok("status", url, "--json"))
    assert status["path"] == url and status["name"] == "early" and status["state"] == "not started"


def test_an_export_is_not_uploaded_over_files_that_are_no_export(tmp_path):
    """`export --out URL` replaces an earlier export there, never anything else (storage.upload_dir)."""
    url = memory_url()
    storage.write_bytes(f"{url}/precious.csv", b"1")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    seal(model)
    with pytest.raises(ConfigError, match=r"^--out: .* holds files but no export.json"):
        storage.upload_dir(model, url, "--out", EXPORT_FILE)
    fs, root = storage.filesystem(url)
    assert fs.cat_file(f"{root}/precious.csv") == b"1" and not fs.exists(f"{root}/config.json")
    fs.rm_file(f"{root}/precious.csv")
    assert storage.upload_dir(model, url, "--out", EXPORT_FILE) == 2
    (model / "config.json").unlink()
    (model / "weights.bin").write_bytes(b"w")
    seal(model)
    storage.upload_dir(model, url, "--out", EXPORT_FILE)                  # the earlier export is replaced whole
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(root)) == [EXPORT_FILE, "weights.bin"]


def seal(model: Path) -> None:
    """export.json listing the sha256 of every other file of `model`: what marks an earlier upload as one."""
    from wpultr.export import EXPORT_FORMAT, export_checksums
    (model / EXPORT_FILE).write_text(json.dumps({"format": EXPORT_FORMAT, "checksums": export_checksums(model)}))
