"""Issue 42: one ownership rule for every file wpultr writes (rundir/ownership.py).

Every writer (score, compare --html, graph show --output, identifiability check --figure, the bench drivers' --out,
export, simulate, ingest, experiment) is pointed, through every spelling of a path (plain, `..`, a symlinked parent,
file://, file://…/..), at files of the user's that the old rule replaced for their type or name: each refuses with
one line and leaves every byte; its own earlier output it replaces through any spelling, until the user edits it.
Then the numbered items: URL run directories, hostile run directories, export integrity, BERT bounds, one-line
errors, empty annotations, duplicate inputs and a dead ingest's temporaries.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.errors import ConfigError, ExportError
from wpultr.export import EXPORT_FILE, export_run, load_export
from wpultr.pipeline.runner import run_pipeline
from wpultr.rundir import layout as L
from wpultr.rundir.ownership import OWNED_FILE, normalise, normalise_url
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from writers import SPELLINGS, USER_FILE, WRITERS, spell, user_files, writer_args

SIM = {"n_queries": 16, "docs_per_query": 8, "n_sessions": 160, "n_annotated_queries": 10,
       "results_per_page": 6, "vocab_size": 120, "n_dense_features": 4}


def invoke(args):
    if callable(args):
        code, text = args()
        return code, text
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def one_line_error(code: int, text: str) -> str:
    assert code == 2, text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    return text.strip()


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


# ---------------------------------------------------------------------------------------------
# Paths and URLs normalised before any check
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url, normal", [
    ("file:///d/victim/fb/..", "file:///d/victim"), ("file:///d/userX/x/..", "file:///d/userX"),
    ("memory://x/userX/x/..", "memory://x/userX"), ("s3://bucket/a/../b", "s3://bucket/b"),
    ("s3://bucket/a/./b//c", "s3://bucket/a/b/c"), ("gs://bucket/..", "gs://bucket")])
def test_a_url_is_normalised_before_any_check(url, normal):
    assert normalise_url(url) == normal


def test_a_local_path_is_normalised_through_dotdot_symlinks_and_file_urls(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    want = tmp_path.resolve() / "real" / "x"
    for spelled in (tmp_path / "real" / "no" / ".." / "x", tmp_path / "link" / "x", want.as_uri(),
                    (tmp_path / "real" / "no").as_uri() + "/../x"):
        assert normalise(spelled) == want


# ---------------------------------------------------------------------------------------------
# Every writer × every spelling
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished(tmp_path_factory, dask_client, one_torch_thread) -> dict[str, Path]:
    """A finished run on simulated dense logs (graph, sessions, ranker), a copy of it, and Baidu-layout logs."""
    tmp = tmp_path_factory.mktemp("own")
    logs = tmp / "logs"
    simulate(SimulateConfig(**{k: v for k, v in SIM.items() if k != "n_dense_features"}), seed=4).write(logs)
    cfg = {"seed": 1, "name": "dense", "run_dir": str(tmp / "runs" / "{name}"),
           "ranker": {"backbone": "mlp", "head": [8]}, "train": {"epochs": 1, "batch_size": 64},
           "cluster": {"n_workers": 1}, "discovery": {"n_sessions": 80, "n_bootstrap": 1},
           "data": {"source": "simulate", "valid_fraction": 0.3, "simulate": SIM}}
    run = run_pipeline(config_from_dict(cfg), client=dask_client).run_dir
    run2 = tmp / "runs" / "other"
    shutil.copytree(run, run2)
    return {"run": Path(run), "run2": run2, "logs": logs}


@pytest.fixture
def ctx(finished, tmp_path, monkeypatch) -> dict[str, Path]:
    monkeypatch.chdir(tmp_path)
    return {**finished, "specs": tmp_path / "specs"}


def _target(name: str, tmp_path: Path) -> Path:
    return tmp_path / "user" / USER_FILE.get(name, "out")


@pytest.mark.e2e
@pytest.mark.parametrize("how", SPELLINGS)
@pytest.mark.parametrize("name", sorted(WRITERS))
def test_no_writer_replaces_a_users_file_through_any_spelling(name, how, ctx, tmp_path):
    """Items 1-5: the user's files of the writer's own type or names, reached through every spelling, are refused
    with one line naming the path, and not a byte of them changes."""
    target = _target(name, tmp_path)
    user_files(name, target, ctx)
    before = snapshot(tmp_path / "user")
    message = one_line_error(*invoke(writer_args(name, spell(target, how), ctx)))
    assert "wpultr replaces only what it wrote there before" in message, message
    assert snapshot(tmp_path / "user") == before


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_writer_replaces_its_own_output_through_any_spelling_until_the_user_edits_it(name, ctx, tmp_path):
    target = _target(name, tmp_path)
    for how in ("plain", "dotdot", "file_url_dotdot"):
        code, text = invoke(writer_args(name, spell(target, how), ctx))
        assert code == 0, (how, text)
    manifest = json.loads(((target.parent if WRITERS[name] != "children" else target) / OWNED_FILE).read_text()) \
        if name != "export" else json.loads((target / EXPORT_FILE).read_text())["checksums"]
    assert manifest                                         # what proves the origin: names and sha256
    edited = next(p for p in ([target] if target.is_file() else sorted(target.rglob("*"))) if p.is_file()
                  and p.name not in (OWNED_FILE, EXPORT_FILE))
    edited.write_bytes(edited.read_bytes() + b"\n# my edit")
    before = snapshot(tmp_path / "user")
    one_line_error(*invoke(writer_args(name, spell(target, "plain"), ctx)))
    assert snapshot(tmp_path / "user") == before


@pytest.mark.parametrize("how", SPELLINGS)
def test_run_dir_never_takes_a_users_directory_through_any_spelling(how, tmp_path):
    """`wpultr run`'s run_dir (its proof of ownership: the .wpultr-run marker) spelled every way at a user's folder."""
    target = tmp_path / "user" / "out"
    target.mkdir(parents=True)
    (target / "config.yaml").write_text("mine: 1\n")
    before = snapshot(tmp_path / "user")
    demo = Path(__file__).resolve().parents[1] / "pipelines" / "demo.yaml"
    code, text = invoke(["run", demo, "--set", f"run_dir={spell(target, how)}", "--set", "cluster.n_workers=1"])
    assert "exists, is not empty and holds no wpultr run" in one_line_error(code, text)
    assert snapshot(tmp_path / "user") == before


# ---------------------------------------------------------------------------------------------
# Item 1: a file:// run_dir with `..`
# ---------------------------------------------------------------------------------------------
def test_item1_a_file_url_run_dir_through_dotdot_never_writes_into_a_foreign_directory(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.yaml").write_text("mine: 1\n")
    (victim / "report.html").write_text("<p>mine</p>")
    before = snapshot(victim)
    demo = Path(__file__).resolve().parents[1] / "pipelines" / "demo.yaml"
    for extra in (["--fresh"], []):
        code, text = invoke(["run", demo, "--set", "name=fb", "--set", f"run_dir={victim.as_uri()}/{{name}}/..",
                             "--set", "cluster.n_workers=1", *extra])
        assert f"{victim.as_uri()}: " in one_line_error(code, text)
        assert snapshot(victim) == before


# ---------------------------------------------------------------------------------------------
# Item 2: export to a URL through `..`
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_item2_export_to_a_url_through_dotdot_never_empties_a_users_directory(finished, tmp_path):
    user = tmp_path / "userX"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    before = snapshot(user)
    for _ in range(2):
        message = one_line_error(*invoke(["export", finished["run"], "--out", (user / "x").as_uri() + "/.."]))
        assert "userX: exists and is not an earlier wpultr export" in message
        assert snapshot(user) == before
    import fsspec
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/i42-userY/notes.txt", b"mine")
    for _ in range(2):
        message = one_line_error(*invoke(["export", finished["run"], "--out", "memory://i42-userY/x/.."]))
        assert "memory://i42-userY holds files but no export.json" in message
    assert fs.cat_file("/i42-userY/notes.txt") == b"mine"
    assert fs.ls("/i42-userY", detail=False) == ["/i42-userY/notes.txt"]
    invoke(["export", finished["run"], "--out", "memory://i42-userZ/x/.."])
    fs.pipe_file("/i42-userZ/config.json", b"{}")          # the user changes a file of the earlier upload
    assert "changed since it was uploaded" in one_line_error(
        *invoke(["export", finished["run"], "--out", "memory://i42-userZ"]))
    assert fs.cat_file("/i42-userZ/config.json") == b"{}"


# ---------------------------------------------------------------------------------------------
# Item 3: simulate never replaces a user's Baidu logs, in either format
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt, mine", [("baidu", "annotations.tsv.gz"), ("parquet", "annotations.parquet")])
def test_item3_simulate_never_replaces_a_users_logs_by_their_names(fmt, mine, tmp_path):
    out = tmp_path / "baidu"
    code, text = invoke(["simulate", "--out", out, "--format", fmt, "--set", "data.simulate.n_sessions=30"])
    assert code == 0, text
    os.remove(out / OWNED_FILE)                   # the same files, but no record that simulate wrote them
    if fmt == "parquet":
        pd.DataFrame({"query_id": ["1"], "label": [1]}).to_parquet(out / mine)
    before = snapshot(out)
    message = one_line_error(*invoke(["simulate", "--out", out, "--format", fmt, "--set",
                                      "data.simulate.n_sessions=30"]))
    assert message.startswith(f"error: --out {out / 'train'}: exists and is not an earlier output of wpultr simulate")
    assert snapshot(out) == before


# ---------------------------------------------------------------------------------------------
# Item 4: an experiment's out_dir holding the user's files
# ---------------------------------------------------------------------------------------------
def test_item4_experiment_out_dir_dot_never_replaces_the_experiment_yaml_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "experiment.yaml"
    spec.write_text("# my comments\nname: mine\nout_dir: .\nbase: {data: {source: simulate}}\n"
                    "methods: [{label: Naive, overrides: {train.method: naive}}]\nseeds: [0]\n")
    (tmp_path / "runs.csv").write_text("my,table\n")
    before = snapshot(tmp_path)
    message = one_line_error(*invoke(["experiment", spec, "--report-only"]))
    assert "out_dir" in message and "experiment.yaml" in message
    assert snapshot(tmp_path) == before
    spec.rename(tmp_path / "spec.yaml")
    message = one_line_error(*invoke(["experiment", tmp_path / "spec.yaml", "--report-only"]))
    assert f"out_dir {tmp_path / 'runs.csv'}: exists and is not an earlier output of wpultr experiment" in message


# ---------------------------------------------------------------------------------------------
# Item 6: hostile or damaged run directories
# ---------------------------------------------------------------------------------------------
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


@pytest.mark.e2e
@pytest.mark.parametrize("text", [BOMB, "name: !!python/object:os.system {}\n"], ids=["alias_bomb", "python_tag"])
def test_item6_a_hostile_run_config_is_one_line_naming_the_file(finished, tmp_path, text):
    run = tmp_path / "run"
    shutil.copytree(finished["run"], run)
    (run / L.CONFIG_FILE).write_text(text)
    table = tmp_path / "t.parquet"
    pd.read_parquet(finished["run"] / L.ANNOTATIONS).to_parquet(table)
    for args in (["export", run, "--out", tmp_path / "model"], ["identifiability", "check", run],
                 ["evaluate", run, "--annotations", table]):
        message = one_line_error(*invoke(args))
        assert f"{run / L.CONFIG_FILE}: " in message, (args, message)


# ---------------------------------------------------------------------------------------------
# Item 7: only a complete export (or a run's own ranker/) is loaded; no symlinks inside
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_item7_an_export_without_export_json_is_refused(finished, tmp_path):
    model = export_run(finished["run"], tmp_path / "model")
    os.remove(model / EXPORT_FILE)
    with pytest.raises(ExportError, match=rf"^{model}: no export.json; expected a complete export"):
        load_export(model)
    load_export(finished["run"] / L.RANKER_DIR)             # a run's own ranker/ is recognised by the run's marker
    copied = tmp_path / "copy" / L.RANKER_DIR               # ... and a copy of it outside a run is not
    shutil.copytree(finished["run"] / L.RANKER_DIR, copied)
    with pytest.raises(ExportError, match="no export.json"):
        load_export(copied)


@pytest.mark.e2e
@pytest.mark.parametrize("link", ["dir", "loop", "file"])
def test_item7_a_symlink_inside_an_export_is_refused(finished, tmp_path, link):
    model = export_run(finished["run"], tmp_path / "model")
    (tmp_path / "elsewhere").mkdir()
    where = model / "extra"
    if link == "dir":
        where.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    elif link == "loop":
        where.symlink_to(model, target_is_directory=True)
    else:
        where.symlink_to(model / "config.json")
    with pytest.raises(ExportError, match=rf"^{where}: a symlink"):
        load_export(model)


# ---------------------------------------------------------------------------------------------
# Item 8: BERT sizes bounded by this machine's memory
# ---------------------------------------------------------------------------------------------
def test_item8_bert_sizes_are_checked_against_memory():
    from wpultr.config import check_machine
    cfg = config_from_dict({"ranker": {"backbone": "bert", "bert": {
        "hidden_size": 8192, "num_hidden_layers": 96, "num_attention_heads": 64, "intermediate_size": 65536}}})
    with pytest.raises(ConfigError, match=r"^ranker.bert: must be hidden_size, num_hidden_layers and "
                                          r"intermediate_size whose training state fits this machine's"):
        check_machine(cfg)
    check_machine(config_from_dict({"ranker": {"backbone": "bert"}}))       # the tiny default fits


# ---------------------------------------------------------------------------------------------
# Item 9: one line, never a traceback
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["simulate", "ingest"])
def test_item9_out_onto_an_existing_file_is_one_line(command, tmp_path):
    (tmp_path / "existing").write_text("mine")
    args = (["simulate", "--out", tmp_path / "existing", "--set", "data.simulate.n_sessions=30"]
            if command == "simulate" else ["ingest", tmp_path / "existing" / "..", "--out", tmp_path / "existing"])
    if command == "ingest":
        simulate(SimulateConfig(n_sessions=20, n_queries=10, n_annotated_queries=3), seed=0).write(tmp_path / "l")
        args[1] = tmp_path / "l" / "train" / "part-00000.gz"
    message = one_line_error(*invoke(args))
    assert str(tmp_path / "existing") in message and "a file stands where its directory would go" in message
    assert (tmp_path / "existing").read_text() == "mine"


@pytest.mark.e2e
def test_item9_export_on_a_full_disk_is_one_line(finished, tmp_path):
    """A real write failure under a 1 kB file-size limit (RLIMIT_FSIZE): shutil.copytree's shutil.Error before."""
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)); from wpultr.cli import app; "
              "sys.argv = ['wpultr'] + sys.argv[1:]; app()")
    done = subprocess.run([sys.executable, "-c", script, "export", str(finished["run"]), "--out",
                           str(tmp_path / "model")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "File too large (errno EFBIG)" in lines[0], done.stderr
    assert not (tmp_path / "model").exists()


@pytest.mark.e2e
def test_item9_mathtext_in_a_run_name_or_a_value_is_drawn_as_written(finished, tmp_path):
    named = tmp_path / "$^$"
    shutil.copytree(finished["run"], named)
    code, text = invoke(["compare", finished["run"], named, "--html", tmp_path / "page.html"])
    assert code == 0, text
    sessions = pd.DataFrame({"session_id": [1, 1, 2, 2], "query_id": ["q", "q", "q", "q"], "position": [1, 2, 1, 2],
                             "click": [1, 0, 0, 1], "doc_id": ["a", "b", "b", "a"],
                             "media": ["$^$", "$x_", "$x_", "$^$"]})
    sessions.to_parquet(tmp_path / "s.parquet")
    code, text = invoke(["identifiability", "check", tmp_path / "s.parquet", "--factors", "position,media",
                         "--figure", tmp_path / "ig.png"])
    assert code == 0, text
    assert (tmp_path / "ig.png").read_bytes().startswith(b"\x89PNG")


# ---------------------------------------------------------------------------------------------
# Items 10 and 11: inputs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b"", b"\n\n"], ids=["no_bytes", "blank_lines"])
def test_item10_an_empty_baidu_annotation_file_is_refused(tmp_path, content):
    import gzip

    from wpultr.errors import SchemaError
    from wpultr.io.baidu import ingest_baidu_annotations, read_baidu_annotations
    path = tmp_path / "annotations.tsv.gz"
    path.write_bytes(gzip.compress(content))
    for read in (read_baidu_annotations, lambda p: ingest_baidu_annotations(p, tmp_path / "out")):
        with pytest.raises(SchemaError, match=rf"^{path}: no annotation rows"):
            read(path)


@pytest.mark.e2e
def test_item10_a_run_on_an_empty_annotation_file_fails_in_one_line(finished, tmp_path):
    (tmp_path / "empty.tsv").write_text("")
    demo = Path(__file__).resolve().parents[1] / "pipelines" / "demo.yaml"
    code, text = invoke(["run", demo, "--set", f"run_dir={tmp_path}/{{name}}", "--set", "cluster.n_workers=1",
                         "--set", f"data.train=[{finished['logs']}/train/*.gz]",
                         "--set", f"data.annotations={tmp_path / 'empty.tsv'}"])
    assert code == 2 and "Traceback" not in text, text
    assert text.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'empty.tsv'}: no annotation rows (it holds "
                                                    f"no annotation line)"), text


def test_item11_a_byte_identical_copy_is_read_once_with_a_warning(tmp_path, caplog):
    simulate(SimulateConfig(n_sessions=40, n_queries=10, n_annotated_queries=3), seed=0).write(tmp_path / "l")
    part = tmp_path / "l" / "train" / "part-00000.gz"
    shutil.copy(part, tmp_path / "copy-of-part.gz")
    with caplog.at_level(logging.WARNING, logger="wpultr.io.tables"):
        code, text = invoke(["ingest", part, tmp_path / "copy-of-part.gz", "--out", tmp_path / "out", "--json"])
    assert code == 0, text
    summary = json.loads(text[text.index("{"):])
    assert summary["sessions"] == 40, summary
    assert sorted([str(tmp_path / "copy-of-part.gz"), str(part)]) in [sorted(d) for d in summary["duplicate_inputs"]]
    assert "the same bytes as" in caplog.text


@pytest.mark.e2e
def test_item11_a_dead_ingests_temporary_folders_are_swept(tmp_path):
    from wpultr.io.tables import sweep_stale_ingests
    from wpultr.rundir.layout import INGEST_MARKER
    simulate(SimulateConfig(n_sessions=20, n_queries=10, n_annotated_queries=3), seed=0).write(tmp_path / "l")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    out = tmp_path / "out"
    import socket
    for host, p in ((socket.gethostname(), pid), ("another-host", pid + 1), (socket.gethostname(), os.getppid())):
        (out / f".sessions.tmp-{p}").mkdir(parents=True)
        (out / f".sessions.tmp-{p}" / INGEST_MARKER).write_text(json.dumps({"complete": False, "host": host,
                                                                             "pid": p}))
        (out / f".quarantine.tmp-{p}").mkdir()
    code, text = invoke(["ingest", tmp_path / "l" / "train" / "part-00000.gz", "--out", out])
    assert code == 0, text
    left = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
    assert f".sessions.tmp-{pid}" not in left and f".quarantine.tmp-{pid}" not in left     # dead, this host: swept
    assert f".sessions.tmp-{pid + 1}" in left and f".sessions.tmp-{os.getppid()}" in left  # another host's, live
    assert sweep_stale_ingests(out) == []
