"""Exports tampered with in many ways: each one ExportError, never another exception.

The exports are of small real runs (export_roundtrip.CASES: the MLP on lexical features of Baidu-layout tokens,
the tiny BERT on the tokens, the LightGBM lambdarank anchor); test_export_round_trip checks that the untouched
exports score as their runs evaluated.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.errors import ExportError
from wpultr.export import (
    CHECKSUMS,
    EXPORT_FILE,
    LEXICAL_DIR,
    export_checksums,
    export_run,
    load_export,
    read_input_table,
    score_table,
)
from wpultr.rankers.base import CONFIG_FILE, WEIGHTS_FILE
from wpultr.rundir import layout as L

pytestmark = pytest.mark.e2e

# the tampers' sources: export_roundtrip.CASES, whose runs test_export_round_trip scores through the export
SOURCES = {"lexical": "mlp", "bert": "bert", "lightgbm": "lightgbm"}


@pytest.fixture(scope="module")
def runs(case_runs) -> dict[str, Path]:
    """One finished run per backbone and feature path."""
    return {name: case_runs[case] for name, case in SOURCES.items()}


@pytest.fixture(scope="module")
def baidu_logs(case_runs) -> Path:
    return case_runs.baidu_logs()


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("exports")
    return {name: export_run(run, out / name) for name, run in runs.items()}


# ---------------------------------------------------------------------------------------------
# Tampered exports: each one ExportError, never another exception
# ---------------------------------------------------------------------------------------------
def _edit_json(name: str, edit):
    """A tampering that applies `edit` to the JSON file `name` of an export (config.json, export.json)."""
    def tamper(model: Path) -> None:
        data = json.loads((model / name).read_text())
        edit(data)
        (model / name).write_text(json.dumps(data))
    return tamper


def _edit_config(edit):
    return _edit_json(CONFIG_FILE, edit)


def _set_arg(key, value):
    return _edit_config(lambda c: c["args"].__setitem__(key, value))


def _set_bert(key, value):
    return _edit_config(lambda c: c["args"]["bert_config"].__setitem__(key, value))


def _edit_weights(edit):
    def tamper(model: Path) -> None:
        state = load_file(str(model / WEIGHTS_FILE))
        edit(state)
        save_file(state, str(model / WEIGHTS_FILE))
    return tamper


def _first_weight(state: dict) -> str:
    return next(k for k in state if k.endswith("weight"))


def _write(name: str, data: bytes | str):
    def tamper(model: Path) -> None:
        path = model / name
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
    return tamper


def _truncate(name: str, keep: float):
    def tamper(model: Path) -> None:
        path = model / name
        path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])
    return tamper


def _remove(name: str):
    def tamper(model: Path) -> None:
        path = model / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return tamper


def _edit_export(edit):
    return _edit_json(EXPORT_FILE, edit)


def _huge_header(model: Path) -> None:
    data = (model / WEIGHTS_FILE).read_bytes()
    (model / WEIGHTS_FILE).write_bytes((2 ** 62).to_bytes(8, "little") + data[8:])


def _lexical_unsorted(model: Path) -> None:
    path = model / LEXICAL_DIR / "lexical_featurizer.npz"
    with np.load(path) as arrays:
        state = {k: arrays[k] for k in arrays.files}
    key = next(k for k in state if k.endswith("token_ids"))
    state[key] = state[key][::-1].copy()
    np.savez(path, **state)


def _garbage_model_text(model: Path) -> None:
    state = load_file(str(model / WEIGHTS_FILE))
    state["model_text"] = torch.frombuffer(bytearray(b"tree\nversion=v4\nnot a model at all\n" * 3), dtype=torch.uint8)
    save_file(state, str(model / WEIGHTS_FILE))
    _set_arg("model_bytes", int(state["model_text"].numel()))(model)


def _non_utf8_model_text(model: Path) -> None:
    state = load_file(str(model / WEIGHTS_FILE))
    state["model_text"] = torch.full_like(state["model_text"], 0xFF)
    save_file(state, str(model / WEIGHTS_FILE))


TAMPERS = {
    # files missing, unreadable, or of another format
    "no directory": ("lexical", lambda m: shutil.rmtree(m)),
    "missing config": ("lexical", _remove(CONFIG_FILE)),
    "missing weights": ("lexical", _remove(WEIGHTS_FILE)),
    "config is a directory": ("lexical", lambda m: ((m / CONFIG_FILE).unlink(), (m / CONFIG_FILE).mkdir())),
    "invalid JSON": ("lexical", _write(CONFIG_FILE, '{"format": "wpultr.ranker/1", "kind": ')),
    "JSON not an object": ("lexical", _write(CONFIG_FILE, "[1, 2, 3]")),
    "deeply nested JSON": ("lexical", _write(CONFIG_FILE, "[" * 100_000 + "]" * 100_000)),
    "huge config file": ("lexical", _write(CONFIG_FILE, " " * (2 << 20) + "{}")),
    "non-UTF-8 config": ("lexical", _write(CONFIG_FILE, b"\xff\xfe{}")),
    "wrong format version": ("lexical", _edit_config(lambda c: c.__setitem__("format", "wpultr.ranker/9"))),
    "unknown kind": ("lexical", _edit_config(lambda c: c.__setitem__("kind", "__import__('os')"))),
    "args not an object": ("lexical", _edit_config(lambda c: c.__setitem__("args", [1]))),
    "missing arg": ("lexical", _edit_config(lambda c: c["args"].pop("n_features"))),
    "extra arg": ("lexical", _set_arg("device", "cuda")),
    "export.json other version": ("lexical", _write("export.json", '{"format": "wpultr.export/0"}')),
    "export.json invalid": ("lexical", _write("export.json", "{nope")),
    # types and ranges of every field
    "negative n_features": ("lexical", _set_arg("n_features", -3)),
    "huge n_features": ("lexical", _set_arg("n_features", 10 ** 12)),
    "n_features as text": ("lexical", _set_arg("n_features", "17")),
    "n_features as bool": ("lexical", _set_arg("n_features", True)),
    "n_features as float": ("lexical", _set_arg("n_features", 17.0)),
    "negative head size": ("lexical", _set_arg("hidden", [-5])),
    "huge head size": ("lexical", _set_arg("hidden", [10 ** 9])),
    "head size in range, not in weights": ("lexical", _set_arg("hidden", [60_000])),
    "head of 1000 layers": ("lexical", _set_arg("hidden", [4] * 1000)),
    "head not a list": ("lexical", _set_arg("hidden", "512")),
    "dropout 1.5": ("lexical", _set_arg("dropout", 1.5)),
    "dropout NaN": ("lexical", _write(CONFIG_FILE, '{"format": "wpultr.ranker/1", "kind": "mlp", "args": '
                                                   '{"n_features": 17, "hidden": [16], "dropout": NaN}}')),
    # the weights against what the config implies
    "truncated weights": ("lexical", _truncate(WEIGHTS_FILE, 0.7)),
    "weights cut inside the header": ("lexical", _truncate(WEIGHTS_FILE, 0.01)),
    "empty weights": ("lexical", _write(WEIGHTS_FILE, b"")),
    "non-safetensors bytes": ("lexical", _write(WEIGHTS_FILE, bytes(range(256)) * 64)),
    "a pickle instead": ("lexical", lambda m: torch.save({"x": torch.zeros(2)}, m / WEIGHTS_FILE)),
    "header length beyond the file": ("lexical", _huge_header),
    "weights with a wrong shape": ("lexical", _edit_weights(
        lambda s: s.__setitem__(_first_weight(s), torch.zeros(3, 3)))),
    "weights with a wrong dtype": ("lexical", _edit_weights(
        lambda s: s.__setitem__(_first_weight(s), s[_first_weight(s)].double()))),
    "extra tensor": ("lexical", _edit_weights(lambda s: s.__setitem__("net.9.weight", torch.zeros(2)))),
    "missing tensor": ("lexical", _edit_weights(lambda s: s.pop(_first_weight(s)))),
    "config n_features differs from weights": ("lexical", _set_arg("n_features", 5)),
    "weights all 1e38: scores overflow": ("lexical", _edit_weights(
        lambda s: [s.__setitem__(k, torch.full_like(v, 1e38)) for k, v in list(s.items()) if k.startswith("net.")])),
    "a NaN weight": ("lexical", _edit_weights(
        lambda s: s[_first_weight(s)].view(-1).__setitem__(0, float("nan")))),
    # the lexical feature state
    "lexical state missing a file": ("lexical", _remove(f"{LEXICAL_DIR}/lexical_featurizer.npz")),
    "lexical JSON garbage": ("lexical", _write(f"{LEXICAL_DIR}/lexical_featurizer.json", "{]")),
    "lexical NPZ garbage": ("lexical", _write(f"{LEXICAL_DIR}/lexical_featurizer.npz", b"PK\x03\x04garbage")),
    "lexical statistics unsorted": ("lexical", _lexical_unsorted),
    "lexical state is a file": ("lexical", lambda m: (_remove(LEXICAL_DIR)(m), _write(LEXICAL_DIR, "{}")(m))),
    # BERT: sizes bounded before anything is allocated
    "absurd max_length": ("bert", _set_arg("max_length", 10 ** 9)),
    "max_length beyond positions": ("bert", _set_arg("max_length", 4096)),
    "million encoder layers": ("bert", _set_bert("num_hidden_layers", 10 ** 6)),
    "huge vocabulary": ("bert", _set_bert("vocab_size", 10 ** 12)),
    "vocabulary in range, not in weights": ("bert", _set_bert("vocab_size", 4096)),
    "width not a multiple of heads": ("bert", _set_bert("num_attention_heads", 5)),
    "unknown activation": ("bert", _set_bert("hidden_act", "os.system")),
    "unknown encoder key": ("bert", _set_bert("torch_dtype", "float16")),
    "special id beyond vocabulary": ("bert", _edit_config(
        lambda c: c["args"]["special_tokens"].__setitem__("cls", 10 ** 6))),
    "special ids missing": ("bert", _set_arg("special_tokens", {"pad": 0})),
    "freeze flag as text": ("bert", _set_arg("freeze_encoder", "yes")),
    # LightGBM: the model text
    "lightgbm model string garbage": ("lightgbm", _garbage_model_text),
    "lightgbm model text not UTF-8": ("lightgbm", _non_utf8_model_text),
    "lightgbm features differ from model": ("lightgbm", _set_arg("n_features", 3)),
    "lightgbm without a model": ("lightgbm", _set_arg("model_bytes", 0)),
}


def _reseal(model: Path) -> None:
    """Recompute export.json's checksums after a tamper, as a deliberate editor would: so each case reaches the
    check it is about, not the checksum (a tamper of export.json itself is left as it is)."""
    try:
        manifest = json.loads((model / EXPORT_FILE).read_text())
    except (OSError, ValueError):
        return
    if isinstance(manifest, dict) and CHECKSUMS in manifest:
        manifest[CHECKSUMS] = export_checksums(model)
        (model / EXPORT_FILE).write_text(json.dumps(manifest))


def _flip_bit(name: str):
    def tamper(model: Path) -> None:
        data = bytearray((model / name).read_bytes())
        data[-3] ^= 0x10
        (model / name).write_bytes(bytes(data))
    return tamper


UNSEALED = {   # caught by export.json's checksums alone: not resealed
    "one bit flipped in the weights": ("lexical", _flip_bit(WEIGHTS_FILE)),
    "one bit flipped in the lexical state": ("lexical", _flip_bit(f"{LEXICAL_DIR}/lexical_featurizer.npz")),
    "a file export.json does not list": ("lexical", _write("notes.txt", "mine")),
    "checksums not a mapping": ("lexical", _edit_export(lambda m: m.__setitem__(CHECKSUMS, ["x"]))),
    "checksum of a file outside": ("lexical", _edit_export(lambda m: m[CHECKSUMS].__setitem__("../x", "0" * 64))),
}


@pytest.mark.parametrize("case", sorted(TAMPERS) + sorted(UNSEALED))
def test_tampered_export_is_one_export_error(case, exports, runs, tmp_path):
    source, tamper = TAMPERS[case] if case in TAMPERS else UNSEALED[case]
    model = tmp_path / "model"
    shutil.copytree(exports[source], model)
    table = pd.read_parquet(runs[source] / L.ANNOTATIONS).head(20)
    load_export(model)  # the untouched copy loads
    tamper(model)
    if case in TAMPERS:
        _reseal(model)
    with pytest.raises(ExportError) as err:
        score_table(model, table)
    message = str(err.value)
    assert "\n" not in message and len(message) < 600, message
    assert str(model) in message  # names the file at fault


def test_cli_shows_a_tampered_export_as_one_line(exports, baidu_logs, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(exports["lexical"], model)
    _set_arg("hidden", [-5])(model)
    _reseal(model)
    result = CliRunner().invoke(app, ["score", str(model), str(baidu_logs / "annotations.tsv.gz"),
                                      "--out", str(tmp_path / "s.parquet")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"error: {model / CONFIG_FILE}: args.hidden[0] is -5, expected an integer in [1, 65536]")


def test_export_refuses_a_run_without_a_ranker(tmp_path):
    from wpultr.errors import RunDirError
    with pytest.raises(RunDirError, match="not a wpultr run directory"):     # not a run at all (issue 44)
        export_run(tmp_path, tmp_path / "out")
    (tmp_path / ".wpultr-run").write_text("")
    with pytest.raises(ExportError, match="no trained ranker"):              # a run that has not trained
        export_run(tmp_path, tmp_path / "out")


def test_read_input_table_names_an_unreadable_parquet(tmp_path):
    bad = tmp_path / "t.parquet"
    bad.write_text("not parquet")
    with pytest.raises(Exception) as err:
        read_input_table(bad)
    assert type(err.value).__name__ == "SchemaError" and str(bad) in str(err.value)
