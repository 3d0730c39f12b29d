"""Export -> score, once for every ranker kind the registry loads (and each feature path a kind reads): the export
holds its files, pickle-free and each under its sha256, and `wpultr score` on what a user scores gives exactly the
scores the run evaluated its test queries with. The evaluate stage scores with the ranker it loads from the run's
ranker/ directory, so the round trip depends on the ranker kind and its inputs, not on the method that trained it."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from export_roundtrip import CASES
from wpultr.cli import app
from wpultr.export import CHECKSUMS, EXPORT_FILE, LEXICAL_DIR, read_input_table
from wpultr.rankers.base import CONFIG_FILE, WEIGHTS_FILE, score_frame
from wpultr.rankers.embedding import VOCABULARY_FILE
from wpultr.rankers.lightgbm import MODEL_TEXT_FILE, LightGBMRanker
from wpultr.rankers.registry import ranker_classes
from wpultr.rankers.xgboost import MODEL_JSON_FILE
from wpultr.rundir import layout as L

pytestmark = pytest.mark.e2e

# the files beside config.json, model.safetensors and export.json that each kind's export holds
OWN_FILES = {"mlp": set(), "bert": set(), "lightgbm": {MODEL_TEXT_FILE}, "xgboost": {MODEL_JSON_FILE},
             "embedding": {VOCABULARY_FILE}}
PICKLE_FREE = {".json", ".safetensors", ".txt", ".npz"}


def test_every_ranker_kind_has_a_round_trip_case():
    assert {kind for kind, _ in CASES.values()} == set(ranker_classes()) == set(OWN_FILES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_then_score_gives_the_runs_own_test_scores(case, case_runs, tmp_path):
    kind = CASES[case][0]
    run = case_runs[case]
    assert json.loads((run / L.RANKER_DIR / CONFIG_FILE).read_text())["kind"] == kind
    if case == "lightgbm":      # boosted on the cluster: lightgbm.dask's model text is the one exported
        assert json.loads((run / L.BIAS).read_text())["distributed"]["engine"] == "lightgbm.dask"
    cli = CliRunner()
    exported = tmp_path / "model"
    result = cli.invoke(app, ["export", str(run), "--out", str(exported)])
    assert result.exit_code == 0, result.output

    # the files: the kind's own, the lexical state only where the MLP reads tokens; none a pickle; each checksummed
    files = {p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file()}
    top = {f for f in files if "/" not in f}
    assert top == {CONFIG_FILE, WEIGHTS_FILE, EXPORT_FILE} | OWN_FILES[kind], top
    assert any(f.startswith(f"{LEXICAL_DIR}/") for f in files) == (case == "mlp")
    assert all(f[f.rfind("."):] in PICKLE_FREE for f in files), files
    for f in files:
        if f.endswith(".npz"):
            with np.load(exported / f, allow_pickle=False) as npz:
                [npz[name] for name in npz.files]       # object arrays would need a pickle: refused
    manifest = json.loads((exported / EXPORT_FILE).read_text())
    assert manifest[CHECKSUMS] == {f: hashlib.sha256((exported / f).read_bytes()).hexdigest()
                                   for f in files - {EXPORT_FILE}}

    # what a user scores, through the CLI, against the run's own test scores: every test row, bit for bit
    out = tmp_path / "scores.parquet"
    source = case_runs.input_file(case)
    result = cli.invoke(app, ["score", str(exported), str(source), "--out", str(out), "--batch-size", "32"])
    assert result.exit_code == 0, result.output
    mine = pd.read_parquet(out)
    theirs = pd.read_parquet(run / L.TEST_SCORES)
    assert len(theirs) > 0 and mine["doc_id"].notna().all()
    both = theirs.merge(mine, on=["query_id", "doc_id", "label"], suffixes=("_run", "_export"),
                        validate="one_to_one")
    assert len(both) == len(theirs)             # every test row of the run is scored by the export
    assert both["score_export"].std() > 0
    np.testing.assert_array_equal(both["score_export"].to_numpy(), both["score_run"].to_numpy())

    # the booster libraries' own files give the same scores as the safetensors copy
    if kind == "lightgbm":
        table = read_input_table(source)
        np.testing.assert_array_equal(score_frame(LightGBMRanker.load(exported), table), mine["score"].to_numpy())
    if kind == "xgboost":
        import xgboost as xgb
        table = read_input_table(source)
        own = xgb.Booster(model_file=str(exported / MODEL_JSON_FILE))
        features = np.stack(table["features"].to_numpy()).astype(np.float32)
        by_row = table.assign(own=own.inplace_predict(features))[["query_id", "doc_id", "own"]]
        mine_own = mine.merge(by_row, on=["query_id", "doc_id"], validate="one_to_one")
        np.testing.assert_array_equal(mine_own["own"].to_numpy(np.float32), mine_own["score"].to_numpy(np.float32))
