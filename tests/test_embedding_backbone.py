"""`ranker.backbone: embedding`: one learned score per doc_id — trains with the neural methods, scores
(unseen ids get the mean score and are counted), refuses what it cannot do at config load, and a tampered
vocabulary is an ExportError."""
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wpultr.config import config_from_dict
from wpultr.errors import ConfigError, ExportError
from wpultr.export import CHECKSUMS, EXPORT_FILE, export_checksums, load_export, score_table
from wpultr.pipeline.runner import run_pipeline
from wpultr.rankers.embedding import VOCABULARY_FILE, EmbeddingRanker
from wpultr.rankers.registry import load_ranker
from wpultr.rundir.layout import MARKER, RANKER_DIR

pytestmark = pytest.mark.e2e

SIM = {"corpus": "onehot", "n_documents": 120, "n_queries": 40, "docs_per_query": 6, "results_per_page": 6,
       "n_sessions": 1500, "n_annotated_queries": 20, "zipf_exponent": 0.0, "n_dense_features": 1,
       "user_model": "pbm", "logging_media_boost": [0.0, 0.0, 0.0, 0.0]}
METHODS = ("naive", "dla", "regression_em", "ipw")


def run_config(tmp: Path, method: str, **overrides) -> dict:
    cfg = {"name": method, "seed": 3, "run_dir": str(tmp / "{name}"),
           "data": {"source": "simulate", "valid_fraction": 0.25, "page_features": {"position": "ordinal"},
                    "simulate": SIM},
           "ranker": {"backbone": "embedding"},
           "train": {"method": method, "epochs": 3, "batch_size": 64, "learning_rate": 0.05, "device": "cpu"},
           "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}}
    for key, value in overrides.items():
        section, name = key.split(".")
        cfg[section] = {**cfg.get(section, {}), name: value}
    return cfg


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dask_client, one_torch_thread) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("embedding_runs")
    return {m: run_pipeline(config_from_dict(run_config(tmp, m)), client=dask_client).run_dir for m in METHODS}


@pytest.mark.parametrize("method", METHODS)
def test_each_neural_method_trains_the_embedding_ranker(method, runs):
    run = runs[method]
    ranker = load_ranker(run / RANKER_DIR)
    assert isinstance(ranker, EmbeddingRanker)
    assert ranker.n_documents == len(ranker.vocabulary) > 0
    scores = ranker.document_scores.detach().numpy()
    assert scores.std() > 0.05                      # moved well away from the near-zero start (INIT_STD 0.01)
    metrics = json.loads((run / "metrics.json").read_text())
    assert np.isfinite(metrics["truth"]["MCC"]) and metrics["truth"]["MCC"] > 0.2


def test_an_unseen_document_scores_the_mean_and_is_counted(runs, tmp_path, caplog):
    model = load_export(runs["naive"] / RANKER_DIR).ranker
    known = model.vocabulary[:2]
    table = pd.DataFrame({"query_id": ["0"] * 4, "doc_id": [known[0], "never-seen", known[1], None]})
    with caplog.at_level(logging.WARNING, logger="wpultr.rankers.embedding"):
        scored = score_table(runs["naive"] / RANKER_DIR, table)
    mean = float(model.document_scores.detach().mean())
    assert scored["score"].iloc[1] == pytest.approx(mean) and scored["score"].iloc[3] == pytest.approx(mean)
    known_score = float(model.document_scores.detach()[model.vocabulary.index(known[0])])
    assert scored["score"].iloc[0] == pytest.approx(known_score)
    assert "2 of 4 rows have a doc_id the embedding ranker did not train on" in caplog.text


@pytest.mark.parametrize("overrides, needle", [
    ({"ranker.backbone": "embeddings"}, "ranker.backbone: 'embeddings' is not allowed; allowed values: 'mlp', "
                                        "'bert', 'lightgbm', 'embedding'"),
    ({"train.streaming": True}, "ranker.backbone: train.streaming: true trains the 'mlp' backbone only"),
])
def test_what_the_backbone_cannot_do_is_one_config_error(overrides, needle, tmp_path):
    with pytest.raises(ConfigError) as error:
        config_from_dict(run_config(tmp_path, "naive", **overrides))
    assert needle in str(error.value) and "\n" not in str(error.value)


def _swap_two_ids(directory: Path) -> None:
    path = directory / VOCABULARY_FILE
    ids = json.loads(path.read_text())
    ids[0], ids[1] = ids[1], ids[0]
    path.write_text(json.dumps(ids))


def _reseal(directory: Path) -> None:
    manifest = json.loads((directory / EXPORT_FILE).read_text())
    manifest[CHECKSUMS] = export_checksums(directory)
    (directory / EXPORT_FILE).write_text(json.dumps(manifest))


@pytest.mark.parametrize("case", ["export, checksums left", "export, checksums resealed", "run's ranker/"])
def test_a_tampered_vocabulary_is_an_export_error(case, runs, tmp_path):
    if case.startswith("export"):
        from wpultr.export import export_run
        model = export_run(runs["naive"], tmp_path / "model")
    else:
        model = tmp_path / "run" / RANKER_DIR      # a run's own ranker/: beside the run's marker
        shutil.copytree(runs["naive"] / RANKER_DIR, model)
        shutil.copy(runs["naive"] / MARKER, model.parent / MARKER)
    _swap_two_ids(model)
    if case.endswith("resealed"):
        _reseal(model)
    with pytest.raises(ExportError) as error:
        load_export(model)
    assert (VOCABULARY_FILE in str(error.value)) and "\n" not in str(error.value)
