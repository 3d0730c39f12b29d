"""The experiment harness on a real LocalCluster: methods × seeds as Dask tasks, tables, figures, report, resume."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
import yaml
from typer.testing import CliRunner

from wpultr.config import ConfigError
from wpultr.experiment import experiment_from_dict, load_experiment, run_experiment
from wpultr.experiment.cli import experiment as experiment_command
from wpultr.experiment.report import write_experiment_report
from wpultr.rundir import layout as L

REPO = Path(__file__).resolve().parents[1]
DCG = ["DCG@1", "DCG@3", "DCG@5", "DCG@10"]
ERR = ["ERR@1", "ERR@3", "ERR@5", "ERR@10"]

pytestmark = pytest.mark.e2e


def experiment_values(out_dir: Path, **extra) -> dict:
    values = {
        "name": "tiny",
        "out_dir": str(out_dir),
        "base": {
            "data": {"source": "simulate", "valid_fraction": 0.3,
                     "simulate": {"n_queries": 30, "n_sessions": 300, "n_annotated_queries": 20}},
            "ranker": {"backbone": "mlp", "head": [16]},
            "train": {"method": "naive", "epochs": 2, "batch_size": 64},
            "discovery": {"n_sessions": 150, "n_bootstrap": 0, "ci_test": "fisherz", "max_depth": 1},
        },
        "methods": [
            {"label": "Naive", "overrides": {"train.loss": "pointwise"}},
            {"label": "Listwise", "overrides": {"train.loss": "listwise"}},
            # validates, then fails at ingest: the declared page feature is not in the logs
            {"label": "Broken", "overrides": {"data.page_features": {"no_such_column": "categorical"}}},
        ],
        "seeds": [0, 1],
        "tables": {"baseline": "Naive", "table1": ["Naive", "Listwise"], "table2": ["Naive", "Listwise"],
                   "table3": ["Listwise", "Naive"], "fig4": ["Naive", "Listwise"],
                   "fig5": ["Naive", "Listwise", "Broken"]},
    }
    values.update(extra)
    return values


@pytest.fixture(scope="module")
def finished(tmp_path_factory, dask_client):
    out = tmp_path_factory.mktemp("exp") / "tiny"
    exp = experiment_from_dict(experiment_values(out))
    lines = []
    records = run_experiment(exp, dask_client, progress=lines.append)
    write_experiment_report(exp, records)
    return exp, records, lines


def _metrics(record) -> dict:
    return json.loads((Path(record.run_dir) / L.METRICS).read_text())


def test_runs_and_failures_are_recorded(finished):
    exp, records, lines = finished
    assert len(records) == 6
    status = {(r.label, r.seed): r.status for r in records}
    assert status == {("Naive", 0): "ok", ("Naive", 1): "ok", ("Listwise", 0): "ok", ("Listwise", 1): "ok",
                      ("Broken", 0): "failed", ("Broken", 1): "failed"}
    broken = [r for r in records if r.label == "Broken"]
    assert all("no_such_column" in r.error for r in broken)
    assert (Path(broken[0].run_dir) / "failure.txt").exists()
    runs = pd.read_csv(exp.out_dir / "runs.csv")
    assert len(runs) == 6 and set(runs["status"]) == {"ok", "failed"}
    # each run has its own directory under the experiment, named after setting, label and seed
    assert {Path(r.run_dir).relative_to(exp.out_dir).as_posix() for r in records if r.label == "Naive"} == \
        {"runs/main/Naive/seed_0", "runs/main/Naive/seed_1"}


def test_same_seed_same_data_for_every_method(finished):
    exp, records, _ = finished
    ok = {(r.label, r.seed): Path(r.run_dir) for r in records if r.succeeded}
    for seed in (0, 1):
        a = pd.read_parquet(ok[("Naive", seed)] / L.TEST_SCORES)
        b = pd.read_parquet(ok[("Listwise", seed)] / L.TEST_SCORES)
        pd.testing.assert_frame_equal(a.drop(columns="score"), b.drop(columns="score"))
    assert not pd.read_parquet(ok[("Naive", 0)] / L.TEST_SCORES)[["query_id", "label"]].equals(
        pd.read_parquet(ok[("Naive", 1)] / L.TEST_SCORES)[["query_id", "label"]])


def test_table1_mean_std_match_per_run_metrics(finished):
    exp, records, _ = finished
    table = pd.read_csv(exp.out_dir / "tables" / "main" / "table1.csv")
    assert table["label"].tolist() == ["Naive", "Listwise"]
    assert table["seeds"].tolist() == [2, 2]
    for metric in DCG + ERR:
        for suffix in ("mean", "std", "sig", "sig_seeds"):
            assert f"{metric} {suffix}" in table.columns
    for _, row in table.iterrows():
        per_seed = [_metrics(r)["all"] for r in records if r.label == row["label"]]
        for metric in DCG + ERR:
            values = np.array([m[metric] for m in per_seed])
            assert row[f"{metric} mean"] == pytest.approx(values.mean(), rel=1e-9)
            assert row[f"{metric} std"] == pytest.approx(values.std(ddof=1), rel=1e-9, abs=1e-12)
    assert table.loc[table["label"] == "Naive", "DCG@1 sig"].isna().all()      # the baseline is not tested
    assert table.loc[table["label"] == "Listwise", "DCG@1 sig_seeds"].str.endswith("/2").all()
    md = (exp.out_dir / "tables" / "main" / "table1.md").read_text()
    assert "| method | seeds | DCG@1 |" in md and "±" in md and "paired t-test" in md


def test_table2_and_table3(finished):
    exp, records, _ = finished
    table2 = pd.read_csv(exp.out_dir / "tables" / "main" / "table2.csv")
    assert [c[:-5] for c in table2.columns if c.endswith(" mean")] == \
        [f"{m} {g}" for m in DCG for g in ("high", "tail")]
    for _, row in table2.iterrows():
        per_seed = [_metrics(r) for r in records if r.label == row["label"]]
        for metric in DCG:
            for group in ("high", "tail"):
                values = [m[group][metric] for m in per_seed if m[group][metric] is not None]
                if values:
                    assert row[f"{metric} {group} mean"] == pytest.approx(np.mean(values))
    table3 = pd.read_csv(exp.out_dir / "tables" / "main" / "table3.csv")
    assert table3["label"].tolist() == ["Listwise", "Naive"]
    assert [c[:-5] for c in table3.columns if c.endswith(" mean")] == DCG
    significance = pd.read_csv(exp.out_dir / "significance.csv")
    listwise = significance[(significance["table"] == "table1") & (significance["label"] == "Listwise")]
    assert sorted(listwise["seed"].unique()) == [0, 1] and (listwise["n_queries"] > 1).all()
    assert listwise["p"].between(0, 1).all()


def test_figures_and_html_report(finished):
    exp, records, _ = finished
    figures = exp.out_dir / "figures" / "main"
    for name in ("fig4.png", "fig5.png"):
        assert (figures / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig4 = pd.read_csv(figures / "fig4.csv")
    assert set(fig4["label"]) == {"Naive", "Listwise", "True labels"}
    assert sorted(fig4["original_position"].unique()) == list(range(1, 11))
    assert fig4["new_position"].dropna().between(1, 20).all()
    report = (exp.out_dir / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 2
    for text in ("Table 1", "Table 2", "Table 3", "Fig. 4", "Fig. 5", "Fig. 3", "no BAL run", "Broken",
                 "no_such_column", "± "):
        assert text in report, text
    assert "Naive" in (exp.out_dir / "tables.md").read_text()


def test_resume_skips_finished_runs(finished, dask_client):
    exp, records, _ = finished
    ok = [r for r in records if r.succeeded]
    stamps = {r.run_dir: (Path(r.run_dir) / L.METRICS).stat().st_mtime_ns for r in ok}
    again = run_experiment(exp, dask_client)
    status = {(r.label, r.seed): r.status for r in again}
    assert [status[(r.label, r.seed)] for r in ok] == ["done"] * 4
    assert status[("Broken", 0)] == "failed"                   # failed runs are tried again
    assert {r.run_dir: (Path(r.run_dir) / L.METRICS).stat().st_mtime_ns for r in ok} == stamps


def test_bad_experiment_keys_name_the_key(tmp_path):
    good = experiment_values(tmp_path / "x")
    with pytest.raises(ConfigError, match="seedz"):
        experiment_from_dict({**good, "seedz": [0]})
    with pytest.raises(ConfigError, match=r"methods\[0\].*train\.epochz"):
        experiment_from_dict({**good, "tables": {}, "methods": [{"label": "A", "overrides": {"train.epochz": 3}}]})
    with pytest.raises(ConfigError, match=r"methods\[0\]\.lable"):
        experiment_from_dict({**good, "methods": [{"lable": "A"}]})
    with pytest.raises(ConfigError, match=r"tables\.table3\[0\].*'BAL'"):
        experiment_from_dict({**good, "tables": {"table3": ["BAL"]}})
    with pytest.raises(ConfigError, match=r"data\.simulate\.n_sessions.*same logs"):
        experiment_from_dict({**good, "tables": {},
                              "methods": [{"label": "A", "overrides": {"data.simulate.n_sessions": 5}}]})
    with pytest.raises(ConfigError, match=r"base: .*train\.method"):
        experiment_from_dict({**good, "base": {"train": {"method": "nope"}}})
    with pytest.raises(ConfigError, match="seeds"):
        experiment_from_dict({**good, "seeds": []})
    with pytest.raises(ConfigError, match=r"settings\.pbm: .*data\.simulate\.user_modle"):
        experiment_from_dict({**good, "settings": {"pbm": {"data.simulate.user_modle": "pbm"}}})
    with pytest.raises(ConfigError, match=r"settings\.pbm\.seed"):
        experiment_from_dict({**good, "settings": {"pbm": {"seed": 3}}})
    # on_invalid_run: record keeps an invalid run as a failed run instead of stopping the experiment
    exp = experiment_from_dict({**good, "on_invalid_run": "record", "tables": {}, "methods": [
        {"label": "A"}, {"label": "Future", "overrides": {"train.not_yet": 1}}]})
    invalid = [r for r in exp.runs if r.config is None]
    assert len(invalid) == 2 and all("Future" in r.invalid and "train.not_yet" in r.invalid for r in invalid)


def test_settings_expand_to_paired_runs(tmp_path):
    exp = experiment_from_dict(experiment_values(
        tmp_path / "x", settings={"pbm": {"data.simulate.user_model": "pbm"}, "wp": {}}))
    assert len(exp.runs) == 2 * 3 * 2
    assert len({r.run_dir for r in exp.runs}) == len(exp.runs)
    by_key = {r.key: r for r in exp.runs}
    assert by_key[("pbm", "Naive", 1)].config["data"]["simulate"]["user_model"] == "pbm"
    assert by_key[("wp", "Naive", 1)].config["data"]["simulate"]["user_model"] == "whole_page"
    assert (by_key[("pbm", "Listwise", 1)].config["data"]["simulate"]
            == by_key[("pbm", "Naive", 1)].config["data"]["simulate"])
    assert by_key[("pbm", "Listwise", 1)].config["train"]["loss"] == "listwise"
    assert by_key[("pbm", "Naive", 1)].config["seed"] == 1


def test_reproduce_configs_validate():
    for name in ("whole_page", "position_only", "corrected_logging"):
        exp = load_experiment(REPO / "pipelines" / "reproduce" / f"{name}.yaml")
        assert len(exp.spec.seeds) == 5 and exp.baseline == "Naive"
        assert any(r.config for r in exp.runs)


def test_fig3_draws_every_epoch_graph(tmp_path):
    from wpultr.experiment.figures import epoch_graphs, plot_fig3
    run = tmp_path / "run"
    assert plot_fig3(run, tmp_path / "none.png") is None                      # no graphs: nothing drawn
    nodes = ["relevance_score", "position", "media_type", "click"]
    edges = [[("relevance_score", "position", "directed"), ("position", "click", "directed"),
              ("media_type", "click", "undirected")],
             [("position", "click", "directed"), ("media_type", "click", "bidirected")]]
    for k, es in enumerate(edges):
        graph = {"format": "wpultr.graph/1", "nodes": nodes, "node_kinds": {},
                 "edges": [{"from": a, "to": b, "type": t, "stability": None, "adjacency": None, "enforced": False}
                           for a, b, t in es], "sepsets": [], "pair_stability": [], "meta": {}}
        (run / f"epoch_{k}").mkdir(parents=True)
        (run / f"epoch_{k}" / "graph.json").write_text(json.dumps(graph))
    (run / L.TRUTH_DIR).mkdir(parents=True)
    (run / L.TRUTH_DIR / "truth.json").write_text(json.dumps({"graph": {
        "nodes": ["relevance", "position", "click"], "relevance_node": "relevance",
        "edges": [{"from": "relevance", "to": "position", "type": "directed"},
                  {"from": "position", "to": "click", "type": "directed"}]}}))
    assert [t for t, _ in epoch_graphs(run)] == ["epoch 0", "epoch 1"]
    path = plot_fig3(run, tmp_path / "fig3.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def _cli_app() -> typer.Typer:
    app = typer.Typer()
    app.command("experiment")(experiment_command)
    app.command("noop")(lambda: None)   # two commands, so `experiment` is a subcommand as in wpultr's app
    return app


def test_cli_runs_on_a_scheduler_and_reports(finished, dask_client, tmp_path):
    exp, _, _ = finished
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(experiment_values(exp.out_dir)))
    runner = CliRunner()
    result = runner.invoke(_cli_app(), ["experiment", str(config), "--scheduler", dask_client.scheduler.address,
                                        "--set", "seeds=[0]"])
    assert result.exit_code == 0, result.output
    assert "2 of 3 runs finished" in result.output and "report:" in result.output
    result = runner.invoke(_cli_app(), ["experiment", str(config), "--report-only"])
    assert result.exit_code == 0, result.output
    assert "4 of 6 runs finished" in result.output
    config.write_text(yaml.safe_dump({**experiment_values(exp.out_dir), "tabels": {}}))
    result = runner.invoke(_cli_app(), ["experiment", str(config)])
    assert result.exit_code == 2 and "tabels" in result.output


def test_relative_paths_in_an_experiment_file_are_relative_to_the_file(tmp_path, monkeypatch):
    spec_dir = tmp_path / "specs" / "deep"
    spec_dir.mkdir(parents=True)
    (tmp_path / "logs").mkdir()
    (spec_dir / "exp.yaml").write_text(
        "name: rel\nseeds: [0]\n"
        "base: {data: {source: simulate, simulate: {corpus: letor, letor_path: ../../logs/a.txt}}}\n"
        "settings:\n  default: {}\n  other: {data.simulate.letor_path: ../b.txt}\n"
        "methods: [{label: Naive, overrides: {train.method: naive}}]\n")
    monkeypatch.chdir(tmp_path / "logs")                     # somewhere else: the file's own directory decides
    exp = load_experiment(spec_dir / "exp.yaml")
    paths = {r.setting: r.config["data"]["simulate"]["letor_path"] for r in exp.runs}
    assert paths == {"default": str((tmp_path / "logs" / "a.txt").resolve()),
                     "other": str((tmp_path / "specs" / "b.txt").resolve())}


def test_a_table_bolds_the_smallest_mean_where_lower_is_better():
    from wpultr.experiment.paper_tables import Column, Table
    table = Table("t", "t", [Column("all", "nDCG@10"), Column("truth", "MSE")], rows=["a", "b"],
                  lower_is_better={"MSE truth"})
    table.mean = {("a", "nDCG@10"): 0.8, ("b", "nDCG@10"): 0.7, ("a", "MSE truth"): 0.03, ("b", "MSE truth"): 0.01}
    table.std = {k: float("nan") for k in table.mean}
    assert table.cell("a", "nDCG@10") == "**0.800**" and table.cell("b", "nDCG@10") == "0.700"
    assert table.cell("b", "MSE truth") == "**0.010**" and table.cell("a", "MSE truth") == "0.030"
