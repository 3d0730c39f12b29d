"""The pipeline end to end on a real LocalCluster: simulated Parquet logs, the Baidu sample, resume."""
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from ranking_bars import random_ranker_dcg10
from wpultr.cli import app
from wpultr.config import ConfigError, config_from_dict
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import STAGES, Stage
from wpultr.rundir import layout as L

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
KS = ("DCG@1", "DCG@3", "DCG@5", "DCG@10", "ERR@1", "ERR@3", "ERR@5", "ERR@10")

# the simulator's dense features carry relevance, so a trained ranker clears a random one by far more than
# a random ranking's DCG@10 varies over these ~14 test queries (SD ≈ 1)
MARGIN = 2.5

pytestmark = pytest.mark.e2e


def simulated_config(tmp_path, **train):
    return config_from_dict({
        "name": "sim", "seed": 3, "run_dir": str(tmp_path / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3,
                 "simulate": {"n_queries": 40, "n_sessions": 400, "n_annotated_queries": 20}},
        "ranker": {"backbone": "mlp", "head": [32, 16]},
        "train": {"epochs": 2, "batch_size": 64, **train},
        "discovery": {"n_sessions": 150, "n_bootstrap": 1},
    })


def test_end_to_end_on_simulated_logs(tmp_path, dask_client):
    cfg = simulated_config(tmp_path)
    result = run_pipeline(cfg, client=dask_client)
    run = result.run_dir
    assert result.ran == [s.name for s in STAGES] and result.skipped == []
    for name in ("config.yaml", "versions.json", "summary.json", "metrics.json", "report.html",
                 "ranker/model.safetensors", "ranker/config.json", L.HISTORY, L.PER_QUERY):
        assert (run / name).exists(), name
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["seed"] == 3 and resolved["train"]["epochs"] == 2
    metrics = json.loads((run / "metrics.json").read_text())
    for group in ("all", "high", "tail"):
        assert group in metrics
    per_query = pd.read_parquet(run / L.PER_QUERY)
    for k in KS:                                        # the summary is the mean of the per-query table
        assert metrics["all"][k] == pytest.approx(per_query[k].mean())
    assert metrics["all"]["DCG@10"] > random_ranker_dcg10(pd.read_parquet(run / L.TEST_SCORES)) + MARGIN
    assert metrics["all"]["n_queries"] == len(json.loads((run / L.SPLIT).read_text())["test_queries"])
    assert "DCG@10" in (run / "report.html").read_text()
    assert (run / L.TRUTH_DIR / "truth.json").exists()
    # the Bradley–Terry position scores and the graph under the trained ranker's scores are in the run
    assert (run / L.PAGE_ENCODER / "page_features.json").exists()
    scores = json.loads((run / "stages" / "preprocess.json").read_text())["info"]["position_scores"]
    assert scores["1"] > scores["10"]
    graph = json.loads((run / "epoch_0" / "graph.json").read_text())
    assert any(e["from"] == "relevance_score" and e["to"] == "click" for e in graph["edges"])


def test_resume_after_a_stage_dies(tmp_path, dask_client):
    cfg = simulated_config(tmp_path)

    def dies(ctx):
        raise RuntimeError("worker lost mid-training")

    broken = tuple(Stage(s.name, dies, s.outputs) if s.name == "train" else s for s in STAGES)
    with pytest.raises(RuntimeError, match="worker lost"):
        run_pipeline(cfg, client=dask_client, stages=broken)
    run = cfg.resolved_run_dir
    assert (run / "stages" / "ingest.json").exists() and not (run / "stages" / "train.json").exists()
    ingest_record = (run / "stages" / "ingest.json").read_text()

    result = run_pipeline(cfg, client=dask_client)
    assert result.skipped == ["ingest", "featurize", "preprocess", "split"]
    assert result.ran == ["train", "discover", "evaluate", "report"]
    assert (run / "stages" / "ingest.json").read_text() == ingest_record  # not redone
    assert result.metrics["all"]["DCG@10"] > random_ranker_dcg10(pd.read_parquet(run / L.TEST_SCORES)) + MARGIN


def test_resume_refuses_a_changed_config(tmp_path, dask_client):
    cfg = simulated_config(tmp_path)
    only_ingest = tuple(s for s in STAGES if s.name == "ingest")
    run_pipeline(cfg, client=dask_client, stages=only_ingest)
    changed = simulated_config(tmp_path, epochs=5)
    with pytest.raises(ConfigError, match="train.epochs"):
        run_pipeline(changed, client=dask_client, stages=only_ingest)


@pytest.mark.skipif(not (SAMPLE / "MANIFEST.json").exists(), reason="data/sample not generated")
def test_bert_naive_on_the_baidu_sample_via_cli(tmp_path):
    manifest = json.loads((SAMPLE / "MANIFEST.json").read_text())
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "bert", "seed": 0, "run_dir": str(tmp_path / "{name}"),
        "data": {"source": "baidu", "train": [str(SAMPLE / "train" / "*.gz")],
                 "annotations": str(SAMPLE / "annotations.tsv.gz"), "max_sessions": 300, "valid_fraction": 0.3},
        "ranker": {"backbone": "bert", "head": [32, 16], "bert": {"max_length": 32}},
        "train": {"epochs": 1, "batch_size": 32},
        "discovery": {"n_sessions": 100, "n_bootstrap": 0},
        "cluster": {"n_workers": 2},
    }))
    result = CliRunner().invoke(app, ["run", str(config)])
    assert result.exit_code == 0, result.output
    assert "report:" in result.output
    run = tmp_path / "bert"
    ingest = json.loads((run / L.INGEST_SUMMARY).read_text())
    assert ingest["sessions"] == manifest["sessions_readable"]
    assert ingest["quarantined"] == manifest["quarantined_lines"]
    shown = CliRunner().invoke(app, ["evaluate", str(run)])
    assert shown.exit_code == 0 and "DCG@10" in shown.output


def test_cli_bad_config_names_the_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("train:\n  loss: hinge\n")
    result = CliRunner().invoke(app, ["run", str(config)])
    assert result.exit_code == 2
    assert "train.loss" in result.output and "pointwise" in result.output


# Issue 29 item 12: where a run executes (cluster.*) may change between a run and its resume; what it computes may
# not. config.yaml keeps the first run's config; each stage's completion record names the cluster it ran on.
def _standin(stage: Stage) -> Stage:
    """`stage` replaced by one that only creates its declared outputs (files holding an empty JSON object)."""
    def run(ctx):
        for output in stage.outputs(ctx.config):
            ctx.run.path(output).parent.mkdir(parents=True, exist_ok=True)
            ctx.run.path(output).write_text("{}")
    return Stage(stage.name, run, stage.outputs)


def test_resume_may_change_the_cluster_and_nothing_else(tmp_path, dask_client):
    from wpultr.config import to_dict
    from wpultr.experiment.harness import is_finished
    from wpultr.experiment.spec import experiment_from_dict
    exp = experiment_from_dict({"name": "x", "out_dir": str(tmp_path / "x"), "base": {"train": {"epochs": 1}},
                                "methods": [{"label": "Naive", "overrides": {"train.method": "naive"}}],
                                "seeds": [0]})
    spec = exp.runs[0]
    first = config_from_dict(spec.config)
    stages = tuple(_standin(s) for s in STAGES)
    run_pipeline(first, client=dask_client, stages=stages[:2])
    saved = (first.resolved_run_dir / "config.yaml").read_text()
    values = to_dict(first)
    values["cluster"] = {"scheduler": "tcp://10.0.0.1:8786", "n_workers": 1, "threads_per_worker": 1,
                         "memory_limit": "1GiB", "connect_timeout": 3.0, "no_worker_timeout": 5.0,
                         "worker_profiling": True}
    moved = config_from_dict(values)
    result = run_pipeline(moved, client=dask_client, stages=stages)
    assert result.skipped == [s.name for s in STAGES[:2]] and result.ran == [s.name for s in STAGES[2:]]
    assert (first.resolved_run_dir / "config.yaml").read_text() == saved          # the first run's config
    summary = json.loads((first.resolved_run_dir / "summary.json").read_text())["stages"]
    assert summary["ingest"]["cluster"]["scheduler"] is None and summary["ingest"]["cluster"]["n_workers"] == 2
    assert summary["train"]["cluster"]["scheduler"] == "tcp://10.0.0.1:8786"
    assert summary["train"]["cluster"]["workers"] == len(dask_client.nthreads())   # the client it really ran on
    spec.config["cluster"] = values["cluster"]
    assert is_finished(spec)                                     # an experiment counts it done, cluster aside
    values["train"]["epochs"] = 2
    with pytest.raises(ConfigError, match=r"holds a run with a different config \(changed: train.epochs\)"):
        run_pipeline(config_from_dict(values), client=dask_client, stages=stages)
