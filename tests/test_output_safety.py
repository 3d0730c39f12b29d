"""No output path destroys what wpultr did not write (issue 29): `--out` of export and score, figures, graph files,
the simulator's directories; the export's checksums and finite scores; clear one-line errors.

Two real finished runs (token logs in the Baidu layout read through lexical features; simulated dense logs with the
click graph) are copied into a scratch "checkout" (pipelines/*.yaml, .git, runs/r2) and the commands of the issue
are run there through the real CLI. A hypothesis property test points `--out` at random existing user files and
directories and checks every byte of the scratch tree that wpultr did not write is unchanged.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.cli_support import user_errors
from wpultr.config import config_from_dict
from wpultr.errors import ExportError, RunDirError
from wpultr.export import EXPORT_FILE, export_checksums, export_run, load_export, score_table
from wpultr.pipeline.runner import run_pipeline
from wpultr.rankers.base import WEIGHTS_FILE
from wpultr.rundir import layout as L
from wpultr.rundir.files import atomic_path
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from writers import SPELLINGS, WRITERS, spell, writer_args

pytestmark = pytest.mark.e2e

SIM = {"n_queries": 16, "docs_per_query": 8, "n_sessions": 160, "n_annotated_queries": 10,
       "results_per_page": 6, "vocab_size": 120, "n_dense_features": 4}


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def ok(*args) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.output


def fails(*args) -> str:
    """The one error line of a command that must fail as a user error (exit code 2, no traceback)."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.startswith("error: "), result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    return result.output.strip()


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (files with their bytes, directories as None)."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dask_client, one_torch_thread) -> dict[str, Path]:
    """`tokens`: Baidu-layout logs, the MLP on lexical features; `dense`: simulated features and epoch_0/graph.json."""
    tmp = tmp_path_factory.mktemp("runs")
    logs = tmp_path_factory.mktemp("baidu")
    simulate(SimulateConfig(**{k: v for k, v in SIM.items() if k != "n_dense_features"}), seed=4).write(logs)
    common = {"seed": 1, "run_dir": str(tmp / "{name}"), "ranker": {"backbone": "mlp", "head": [8]},
              "train": {"epochs": 1, "batch_size": 64}, "cluster": {"n_workers": 1}}
    configs = {
        "tokens": {**common, "name": "tokens", "evaluation": {"discover_graph": False},
                   "data": {"source": "baidu", "valid_fraction": 0.3, "train": [str(logs / "train" / "*.gz")],
                            "annotations": str(logs / "annotations.tsv.gz")}},
        "dense": {**common, "name": "dense", "discovery": {"n_sessions": 80, "n_bootstrap": 1},
                  "data": {"source": "simulate", "valid_fraction": 0.3, "simulate": SIM}},
    }
    found = {name: run_pipeline(config_from_dict(cfg), client=dask_client).run_dir for name, cfg in configs.items()}
    found["logs"] = logs
    return found


@pytest.fixture
def checkout(runs, tmp_path, monkeypatch) -> Path:
    """A scratch repository checkout as a user has one, the working directory: pipelines/, .git, runs/r2, keep/."""
    root = tmp_path / "checkout"
    (root / "pipelines").mkdir(parents=True)
    (root / "pipelines" / "bal.yaml").write_text("name: bal\n")
    (root / "pipelines" / "naive.yaml").write_text("name: naive\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "README.md").write_text("# mine\n")
    (root / "keep").mkdir()
    (root / "keep" / "notes.txt").write_text("do not lose\n")
    shutil.copytree(runs["tokens"], root / "runs" / "r2")
    shutil.copy(runs["logs"] / "annotations.tsv.gz", root / "annotations.tsv.gz")
    pd.read_parquet(runs["tokens"] / L.ANNOTATIONS).to_parquet(root / "table.parquet")
    monkeypatch.chdir(root)
    return root


# ---------------------------------------------------------------------------------------------
# Item 1: the exact commands of the issue, against a scratch checkout
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["export", "runs/r2", "--out", "pipelines"], "--out pipelines: exists and is not an earlier wpultr export"),
    (["export", "runs/r2", "--out", "runs/r2"], "--out runs/r2: is, holds or lies inside an input"),
    (["export", "runs/r2", "--out", "."], "--out .: is the working directory or holds it"),
    (["export", "runs/r2", "--out", ".."], "--out ..: is the working directory or holds it"),
    (["export", "runs/r2", "--out", "runs/r2/ranker"], "--out runs/r2/ranker: is, holds or lies inside an input"),
    (["export", "runs/r2", "--out", "runs"], "--out runs: is, holds or lies inside an input"),
    (["export", "runs/r2", "--out", "keep"], "--out keep: exists and is not an earlier wpultr export"),
    (["export", "runs/r2", "--out", "README.md"], "--out README.md: exists and is not an earlier wpultr export"),
    (["score", "runs/r2/ranker", "annotations.tsv.gz", "--out", "keep/"], "--out keep: exists and is not an "
                                                                          "earlier output of wpultr score"),
    (["score", "runs/r2/ranker", "table.parquet", "--out", "table.parquet"], "--out table.parquet: is, holds or "
                                                                             "lies inside an input"),
    (["score", "runs/r2/ranker", "annotations.tsv.gz", "--out", "runs/r2/ranker/s.parquet"], "lies inside an input"),
    (["score", "runs/r2/ranker", "annotations.tsv.gz", "--out", "README.md"], "--out README.md: exists and is not "
                                                                              "an earlier output of wpultr score"),
    (["identifiability", "check", "runs/r2", "--figure", "keep/"], "keep: exists and is not an earlier output of "
                                                                   "wpultr identifiability check --figure"),
])
def test_an_output_never_replaces_what_wpultr_did_not_write(checkout, args, says):
    before = snapshot(checkout)
    message = fails(*args)
    assert says in message and "wpultr replaces only what it wrote there before" in message, message
    assert snapshot(checkout) == before        # nothing removed, nothing changed, nothing left behind


def test_outputs_wpultr_wrote_are_replaced_and_a_run_ranker_stays_exportable(checkout):
    ok("export", "runs/r2", "--out", "model")
    first = (checkout / "model" / EXPORT_FILE).read_bytes()
    ok("export", "runs/r2", "--out", "model")            # an earlier export is replaced whole
    assert (checkout / "model" / EXPORT_FILE).read_bytes() == first
    fails("export", "runs/r2", "--out", "runs/r2/ranker")  # refused: later exports still work
    ok("export", "runs/r2", "--out", "model2")
    ok("score", "model", "annotations.tsv.gz", "--out", "s.parquet")
    ok("score", "model", "annotations.tsv.gz", "--out", "s.parquet")   # an earlier score output is replaced
    (checkout / "model" / "NOTES.txt").write_text("mine")
    before = snapshot(checkout)
    assert "exists and is not an earlier wpultr export" in fails("export", "runs/r2", "--out", "model")
    assert snapshot(checkout) == before


def test_figures_replace_only_a_png(checkout):
    ok("identifiability", "check", "runs/r2", "--figure", "graph.png")
    ok("identifiability", "check", "runs/r2", "--figure", "graph.png")
    assert (checkout / "graph.png").read_bytes().startswith(b"\x89PNG")
    assert "README.md: exists and is not an earlier output of wpultr identifiability" in fails(
        "identifiability", "check", "runs/r2", "--figure", "README.md")


def test_graph_show_output_into_a_directory_is_one_line(runs, tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "a.txt").write_text("x")
    message = fails("graph", "show", runs["dense"], "--output", tmp_path / "keep")
    assert message.startswith(f"error: --output {tmp_path / 'keep'}: exists and is not an earlier output of wpultr "
                              f"graph show")
    assert (tmp_path / "keep" / "a.txt").read_text() == "x"
    ok("graph", "show", runs["dense"], "--output", tmp_path / "g.txt")
    ok("graph", "show", runs["dense"], "--output", tmp_path / "g.txt")          # its own earlier file
    assert "exists and is not an earlier output of wpultr graph show" in fails(
        "graph", "show", runs["dense"], "-f", "dot", "--output", tmp_path / "keep" / "a.txt")


def test_simulate_replaces_its_own_directories_only(tmp_path):
    out = tmp_path / "logs"
    small = ["--set", "data.simulate.n_sessions=30", "--set", "data.simulate.n_queries=10",
             "--set", "data.simulate.n_annotated_queries=5"]
    ok("simulate", "--out", out, *small)
    ok("simulate", "--out", out, *small)                 # its own train/ and truth/ are replaced
    (out / "train" / "mine.csv").write_text("1")
    before = snapshot(tmp_path)
    assert "train: exists and is not an earlier output of wpultr simulate" in fails("simulate", "--out", out, *small)
    assert snapshot(tmp_path) == before


def test_atomic_path_never_replaces_a_symlink(tmp_path):
    target = tmp_path / "x"
    with atomic_path(target) as tmp:
        tmp.write_text("file")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(RunDirError, match="link: is a symlink"), atomic_path(tmp_path / "link") as tmp:
        tmp.write_text("other")
    assert target.read_text() == "file" and (tmp_path / "link").is_symlink()


# ---------------------------------------------------------------------------------------------
# Property: for random --out targets among the user's files, nothing wpultr did not write changes
# ---------------------------------------------------------------------------------------------
NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
TREE = st.dictionaries(st.lists(NAMES, min_size=1, max_size=3).map("/".join), st.binary(max_size=64),
                       min_size=1, max_size=8)


@pytest.fixture(scope="module")
def property_root(runs, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("property")
    shutil.copytree(runs["dense"], root / "run")        # a graph for graph show, dense features for score
    shutil.copytree(runs["dense"], root.with_name(root.name + "_b"))     # the second run compare --html reads
    return root


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREE, pick=st.integers(min_value=0), command=st.sampled_from(sorted(WRITERS)),
       as_dir=st.booleans(), how=st.sampled_from(SPELLINGS))
def test_no_user_file_is_removed_or_changed_by_an_output(property_root, runs, tree, pick, command, as_dir, how):
    """Every writer (issue 42), its output spelled every way (plain, `..`, a symlinked parent, file://,
    file://…/..), pointed at random user files and folders: nothing the user had changes; an output that was not
    there appears."""
    user = property_root / "user"
    shutil.rmtree(user, ignore_errors=True)
    for rel, data in tree.items():
        path = user / rel
        if any(p.is_file() for p in [*path.parents][: len(Path(rel).parts) - 1]):
            continue                                     # a name used as a file and a directory: keep the file
        if path.is_dir():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    targets = [user, property_root, property_root / "run", user / "new_output", *sorted(user.rglob("*"))]
    target = targets[pick % len(targets)]
    fresh = not target.exists()
    before = {**snapshot(property_root / "run"), **{f"user/{k}": v for k, v in snapshot(user).items()}}
    cwd = os.getcwd()
    os.chdir(user)
    try:
        out = f"{spell(target, how) if target != property_root else target}{'/' if as_dir else ''}"
        args = writer_args(command, out, {"run": property_root / "run", "logs": runs["logs"],
                                          "run2": property_root.with_name(property_root.name + "_b"),
                                          "specs": property_root.parent / "specs"})
        if callable(args):
            code, output = args()
        else:
            result = invoke(*args)
            code, output = result.exit_code, result.output
    finally:
        os.chdir(cwd)
        link = target.parent.with_name(target.parent.name + "_link")
        if link.is_symlink():
            link.unlink()
    assert code in (0, 2) and "Traceback" not in output, output
    assert code == 0 or not fresh, output                                   # a new output is never refused
    after = {**snapshot(property_root / "run"), **{f"user/{k}": v for k, v in snapshot(user).items()}}
    assert {k: after.get(k) for k in before} == before                      # nothing the user had is touched
    assert code == 2 or {k for k in after if k not in before} or not target.is_relative_to(user)   # output added


# ---------------------------------------------------------------------------------------------
# Item 10: checksums in export.json, finite weights and scores
# ---------------------------------------------------------------------------------------------
def reseal(model: Path) -> None:
    """Recompute export.json's checksums after a deliberate edit: what the later checks must catch on their own."""
    manifest = json.loads((model / EXPORT_FILE).read_text())
    manifest["checksums"] = export_checksums(model)
    (model / EXPORT_FILE).write_text(json.dumps(manifest))


@pytest.fixture
def model(runs, tmp_path) -> Path:
    return export_run(runs["dense"], tmp_path / "model")


@pytest.fixture
def table(runs) -> pd.DataFrame:
    return pd.read_parquet(runs["dense"] / L.ANNOTATIONS)


def test_export_json_holds_the_sha256_of_every_file(model):
    manifest = json.loads((model / EXPORT_FILE).read_text())
    assert manifest["checksums"][WEIGHTS_FILE] == hashlib.sha256((model / WEIGHTS_FILE).read_bytes()).hexdigest()
    assert set(manifest["checksums"]) == {p.relative_to(model).as_posix() for p in model.rglob("*")
                                          if p.is_file() and p.name != EXPORT_FILE}


def test_a_one_bit_flip_in_the_weights_is_an_export_error(model, table):
    data = bytearray((model / WEIGHTS_FILE).read_bytes())
    data[-5] ^= 0x01                                     # in the last tensor's data: still a valid safetensors file
    (model / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(ExportError, match=rf"^{model / WEIGHTS_FILE}: its sha256 differs from the one in export.json"):
        score_table(model, table)


def test_an_export_without_checksums_is_refused_and_never_replaced(model, runs):
    """Issue 42 item 7: nothing of an export.json without checksums can be verified, so it is neither loaded nor
    taken for wpultr's own output (export --out replaces only an export whose every file matches its checksum)."""
    manifest = json.loads((model / EXPORT_FILE).read_text())
    del manifest["checksums"]
    (model / EXPORT_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ExportError, match=r"export.json: lists no checksums"):
        load_export(model)
    with pytest.raises(RunDirError, match="exists and is not an earlier wpultr export"):
        export_run(runs["dense"], model)


def _set_weights(model: Path, value: float) -> None:
    state = load_file(str(model / WEIGHTS_FILE))
    for name in state:
        if name.startswith("net.") and state[name].is_floating_point():
            state[name] = torch.full_like(state[name], value)
    save_file(state, str(model / WEIGHTS_FILE))
    reseal(model)


def test_weights_that_overflow_give_no_scores(model, table, tmp_path):
    _set_weights(model, 1e38)
    message = fails("score", model, table_path(table, tmp_path), "--out", tmp_path / "s.parquet")
    assert message.startswith(f"error: {model}/{WEIGHTS_FILE}: the ranker gives non-finite scores for")
    assert not (tmp_path / "s.parquet").exists()


def test_non_finite_weights_are_refused_at_load(model):
    _set_weights(model, float("nan"))
    with pytest.raises(ExportError, match=rf"^{model / WEIGHTS_FILE}: tensor 'net\..*' holds .* non-finite"):
        load_export(model)


def table_path(table: pd.DataFrame, tmp_path: Path) -> Path:
    path = tmp_path / "table.parquet"
    table.to_parquet(path)
    return path


# ---------------------------------------------------------------------------------------------
# Item 12: a run's ranker/ reads its lexical state; file:// models; write errors as one line
# ---------------------------------------------------------------------------------------------
def test_a_runs_own_ranker_scores_a_token_table_as_its_export_does(runs, tmp_path):
    annotations = runs["logs"] / "annotations.tsv.gz"
    ok("score", runs["tokens"] / L.RANKER_DIR, annotations, "--out", tmp_path / "run.parquet")
    export_run(runs["tokens"], tmp_path / "model")
    ok("score", tmp_path / "model", annotations, "--out", tmp_path / "export.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "run.parquet"),
                                  pd.read_parquet(tmp_path / "export.parquet"))


def test_an_export_given_as_a_file_url_scores(model, table, tmp_path):
    ok("score", model.as_uri(), table_path(table, tmp_path), "--out", tmp_path / "s.parquet")
    assert len(pd.read_parquet(tmp_path / "s.parquet")) == len(table)
    missing = (tmp_path / "nothing").as_uri()
    assert fails("score", missing, table_path(table, tmp_path), "--out", tmp_path / "t.parquet") == (
        f"error: {missing}: not an exported ranker (wpultr export) or a run's ranker/ directory (nothing is "
        f"stored there: no config.json)")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_write_error_is_one_line_naming_the_path(code, capsys):
    @user_errors
    def command():
        raise OSError(code, os.strerror(code), "/data/out.parquet")
    with pytest.raises(Exception) as exit_:
        command()
    assert getattr(exit_.value, "exit_code", None) == 2
    assert capsys.readouterr().err == (f"error: /data/out.parquet: {os.strerror(code)} (errno "
                                       f"{errno.errorcode[code]}); free space or choose another output\n")


def test_a_file_too_large_ends_in_one_line_not_a_traceback(tmp_path):
    """A real EFBIG: the simulator's logs written under a 2 kB file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored)."""
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048)); from wpultr.cli import app; "
              "sys.argv = ['wpultr'] + sys.argv[1:]; app()")
    done = subprocess.run([sys.executable, "-c", script, "simulate", "--out", str(tmp_path / "logs"), "--set",
                           "data.simulate.n_sessions=200"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "File too large (errno EFBIG)" in lines[0] and str(tmp_path / "logs") in lines[0]
