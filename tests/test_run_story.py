"""A run tells its user what it found and whether to ship (issue 44): one epoch numbering everywhere, the shipped
epoch stated by every output, and a verdict with plain-word warnings."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wpultr.rundir.epochs import epoch_label, renumber, shipped, shipped_line


def _entry(phase, valid, **more):
    return {"epoch": None, "phase": phase, "seconds": 1.0, "train": {"loss": 0.5}, "valid": {"DCG@10": valid}, **more}


def test_warm_up_is_named_and_the_methods_epochs_count_from_zero():
    history = [_entry("warmup", 25.8), _entry("bal", 25.6, bal_epoch=0), _entry("bal", 25.0, bal_epoch=1),
               _entry("bal", 25.4, bal_epoch=2)]
    for step, e in enumerate(history):     # as the trainers record them: the place in training
        e["epoch"] = step
    out, bias = renumber(history, {"method": "bal", "best_epoch": 1})
    assert [epoch_label(e) for e in out] == ["warm-up 1", "epoch 0", "epoch 1", "epoch 2"]
    assert [e["step"] for e in out] == [0, 1, 2, 3]
    assert bias["best_epoch"] == 0 == bias["shipped"]["epoch"]          # BAL epoch 0 = epoch_0/graph.json
    line = shipped_line(bias["shipped"], "bal")
    assert line.startswith("shipped: BAL epoch 0 — best validation DCG@10 25.6000 of epochs 0–2 (last epoch 25.4000)")
    assert "warm-up ranker scored 25.8000" in line
    assert renumber(out, bias) == (out, bias)                            # written once, read as it is


def test_without_validation_the_last_epoch_is_shipped_and_says_why():
    history = [{"epoch": i, "train": {"loss": 1.0}, "valid": None} for i in range(3)]
    _, bias = renumber(history, {"method": "naive", "best_epoch": None})
    assert bias["shipped"]["epoch"] == 2 and "no validation queries" in bias["shipped"]["why"]


def _write(root: Path, rel: str, data) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _clicks(model_perplexity: float, ctr_perplexity: float) -> dict:
    def model(p):
        return {"log_likelihood": -0.3, "perplexity": {"overall": p, "by_position": {"1": p}}}
    return {"sessions": 50, "rows": 500, "models": {"ctr": model(ctr_perplexity), "bal": model(model_perplexity)}}


@pytest.mark.parametrize("model, ctr, warned", [(1.3685, 1.3466, True), (1.30, 1.3466, False)])
def test_the_verdict_warns_when_the_click_model_loses_to_per_position_ctr(tmp_path, model, ctr, warned):
    from wpultr.report.verdict import verdict
    history = [_entry("bal", 25.6, bal_epoch=0, epoch=0)]
    _, bias = renumber(history, {"method": "bal", "best_epoch": 0})
    _write(tmp_path, "train/history.json", {"method": "bal", "epochs": history})
    _write(tmp_path, "train/bias.json", bias)
    _write(tmp_path, "metrics.json", {"all": {"n_queries": 9, "DCG@10": 20.0}, "clicks": _clicks(model, ctr)})
    text = verdict(tmp_path).text()
    assert text.startswith("Verdict\n-------\nshipped: BAL epoch 0")
    assert ("per-position CTR baseline (perplexity" in text) is warned
    assert ("no warnings" in text) is not warned


# ---------------------------------------------------------------------------------------------------------------
# A real run: BAL with a warm-up and held-out sessions, and a Naive baseline on the same logs
# ---------------------------------------------------------------------------------------------------------------
def _run(tmp_path, client, method, **train):
    from wpultr.config import config_from_dict
    from wpultr.pipeline.runner import run_pipeline
    cfg = config_from_dict({
        "name": method, "seed": 3, "run_dir": str(tmp_path / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3,
                 "simulate": {"n_queries": 40, "n_sessions": 600, "n_annotated_queries": 20}},
        "ranker": {"backbone": "mlp", "head": [16]},
        "train": {"epochs": 2, "batch_size": 64, "method": method, **train},
        "evaluation": {"heldout_sessions": 0.25},
        "discovery": {"n_sessions": 150, "n_bootstrap": 1}})
    return run_pipeline(cfg, client=client).run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dask_client):
    root = tmp_path_factory.mktemp("story")
    return _run(root, dask_client, "bal", warmup_epochs=1), _run(root, dask_client, "naive")


@pytest.mark.e2e
def test_every_output_tells_the_same_shipped_epoch(runs):
    from wpultr.causal.cli import graph_app
    bal, _ = runs
    history = json.loads((bal / "train" / "history.json").read_text())["epochs"]
    assert [epoch_label(e) for e in history] == ["warm-up 1", "epoch 0", "epoch 1"]
    assert all(e["epoch"] == e["bal_epoch"] for e in history if e["phase"] == "bal")
    record = shipped(bal)
    bias = json.loads((bal / "train" / "bias.json").read_text())
    assert bias["best_epoch"] == record["epoch"] in (0, 1)
    k = record["epoch"]
    best = max((e for e in history if e["phase"] == "bal"), key=lambda e: e["valid"]["DCG@10"])
    assert best["epoch"] == k
    line = shipped_line(record, "bal")
    shown = CliRunner().invoke(graph_app, ["show", str(bal)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[0] == f"epoch {k} (the shipped ranker's)"
    assert f"examination by position (epoch {k}'s click model" in shown.output
    metrics = json.loads((bal / "metrics.json").read_text())
    assert metrics["clicks"]["fitted"]["bal"]["bal_epoch"] == k     # evaluate's click model: the shipped epoch's
    report = (bal / "report.html").read_text()
    assert report.index("<h2>Verdict</h2>") < report.index("Metrics on held-out annotated queries")
    assert line.split(";")[0].replace("—", "&mdash;") in report or line.split(";")[0] in report
    assert f"data-epoch='{k}'>" in report and f"epoch {k} (shipped)" in report
    from wpultr.cli import app
    evaluated = CliRunner().invoke(app, ["evaluate", str(bal)])
    assert evaluated.exit_code == 0, evaluated.output
    assert evaluated.output.startswith(line)


@pytest.mark.e2e
def test_the_verdict_tests_the_ranker_against_a_baseline_run(runs):
    from wpultr.cli import app
    bal, naive = runs
    out = CliRunner().invoke(app, ["verdict", str(bal), "--baseline", str(naive)])
    assert out.exit_code == 0, out.output
    text = out.output
    assert text.startswith("Verdict\n")
    for part in ("page feature -> click in epoch", "shipped ranker on the test queries",
                 "click models on", "against the baseline naive on"):
        assert part in text
    data = json.loads(CliRunner().invoke(app, ["verdict", str(bal), "--baseline", str(naive), "--json"]).output)
    tests = data["baseline"]["tests"]
    assert set(tests) >= {"DCG@10", "DCG@5"} and all(0 <= t["p"] <= 1 for t in tests.values() if t["p"] == t["p"])
    worse = [m for m, t in tests.items() if t["p"] < 0.05 and t["difference"] < 0]
    assert all(f"significantly worse than the baseline naive on {m}" in text for m in worse)


# ---------------------------------------------------------------------------------------------------------------
# Tables for people, --json for machines (item 3)
# ---------------------------------------------------------------------------------------------------------------
def test_compare_marks_significant_rows_and_rounds_every_number_alike():
    import numpy as np
    import pandas as pd

    from wpultr.report.compare import Comparison, format_text, to_dict
    rng = np.random.default_rng(0)
    base = pd.DataFrame({"query_id": [str(i) for i in range(30)], "DCG@10": rng.normal(20, 2, 30),
                         "ERR@10": rng.uniform(0.5, 0.7, 30)})
    better = base.assign(**{"DCG@10": base["DCG@10"] + 1.0 + rng.normal(0, 0.1, 30),
                            "ERR@10": base["ERR@10"] + rng.normal(0, 0.05, 30)})
    text = format_text(Comparison(["a", "b"], "query_id", ["DCG@10", "ERR@10"], {"a": base, "b": better}))
    rows = {line.split()[0]: line for line in text.splitlines()[3:]}
    assert rows["DCG@10"].endswith("<0.001  *") and not rows["ERR@10"].endswith("*")
    for line in rows.values():           # means and differences to 4 decimals, p to 3
        cells = line.split()
        assert all(len(c.split(".")[1]) == 4 for c in cells[1:4]) and cells[4] in ("<0.001",) or len(cells[4]) == 5
    data = to_dict(Comparison(["a", "b"], "query_id", ["DCG@10", "ERR@10"], {"a": base, "b": better}))
    assert data["metrics"]["DCG@10"]["tests"]["b"]["significant"] is True


def test_stage_lines_read_as_words_not_dicts():
    from wpultr.report.text import stage_line
    line = stage_line("train", 7.46, {"train_rows": 23867, "valid_rows": 600, "shipped": "epoch 2",
                                      "identifiability": {"checked": False, "reason": "method 'naive' models no bias"}})
    assert line == ("[wpultr] train          7.5 s  train rows 23867 · valid rows 600 · shipped epoch 2 · "
                    "identifiability method 'naive' models no bias")
    assert "{" not in stage_line("split", 1.0, {"valid_queries": 30, "position_scores": {"1": 2.3, "2": 1.7}})


def test_ingest_prints_a_table_and_json_on_request(tmp_path):
    from wpultr.cli import app
    log = Path(__file__).resolve().parents[1] / "data" / "sample" / "train" / "part-00000.gz"
    shown = CliRunner().invoke(app, ["ingest", str(log), "--out", str(tmp_path / "a")])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].split() == ["ingest", "value"] and any(line.split()[:1] == ["sessions"] for line in lines)
    assert "{" not in shown.output
    as_json = CliRunner().invoke(app, ["ingest", str(log), "--out", str(tmp_path / "b"), "--json"])
    assert json.loads(as_json.output)["sessions"] > 0


# ---------------------------------------------------------------------------------------------------------------
# Evidence that agrees with itself (item 4)
# ---------------------------------------------------------------------------------------------------------------
def test_a_removed_edge_shows_the_p_that_removed_it_and_the_r_hat_association_is_labelled():
    from wpultr.causal.graph import _click_evidence_lines
    effect = {"given": ["relevance_score"], "p_value": 3.23e-32, "loglik_gain_per_row": 1e-3, "click_rate_change": 0.01}
    meta = {"click_rows": {"n_rows": 100, "n_sessions": 10, "source": "x"},
            "click_evidence": [
                {"node": "serp_height", "in_graph": False, "p_value": 0.40, "verdict": "no edge", "effect": effect,
                 "decision": "removed: independent given nothing",
                 "within_document": {"levels": [{"level": "per sd", "ratio": 1.04, "ci95": [0.89, 1.23]}],
                                     "p_value": 0.40}},
                {"node": "media_type", "in_graph": False, "p_value": 1.0, "verdict": "not testable within documents",
                 "effect": effect, "decision": "not testable within documents"}]}
    lines = _click_evidence_lines(meta)
    header = next(line for line in lines if line.startswith("node"))
    assert "p (decided)" in header and "given r̂" in header and "p (effect)" not in header
    rows = {line.split()[0]: line.split() for line in lines if line.split()[:1] in (["serp_height"], ["media_type"])}
    assert rows["serp_height"][2] == "4.00e-01"           # the test that removed the edge, then the r̂ association
    assert rows["media_type"][2] == "-"                   # no test decided it


def _examination_run(root: Path, corrected: list) -> Path:
    cell = {"relative": 1.0, "low": 0.9, "high": 1.1, "rows": 10}
    table = {"interval": "95%", "by_position": {"1": {**cell, "low": 1.0, "high": 1.0}, "2": {**cell, "relative": 0.6}},
             "levels": {"media_type": {"n_codes": 3, "codes": {"1": {**cell, "rows": 12}, "2": {**cell}}}}}
    history = [{"epoch": 0, "phase": "bal", "bal_epoch": 0, "train": {"loss": 1.0, "examination": table},
                "valid": {"DCG@10": 1.0}, "biases": {"page_feature_biases": corrected}}]
    _, bias = renumber(history, {"method": "bal", "best_epoch": 0})
    _write(root, "train/history.json", {"method": "bal", "epochs": history})
    _write(root, "train/bias.json", bias)
    return root


@pytest.mark.parametrize("corrected, drawn", [(["position"], False), (["position", "media_type"], True)])
def test_the_report_draws_examination_by_level_only_for_corrected_features(tmp_path, corrected, drawn):
    from wpultr.report.figures import examination_figure
    figure = examination_figure(_examination_run(tmp_path, corrected))
    assert figure.drawn
    assert ("Not drawn by level: media_type" in figure.note) is not drawn


# ---------------------------------------------------------------------------------------------------------------
# Errors before work (item 7)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["my run", "a;b", "$HOME", "x'y"])
def test_a_run_name_a_shell_cannot_take_back_is_refused(name):
    from wpultr.config import config_from_dict
    from wpultr.errors import ConfigError
    with pytest.raises(ConfigError, match=r"^name: "):
        config_from_dict({"name": name})


def test_a_missing_annotation_file_is_named_before_any_cluster_starts(tmp_path):
    from wpultr import cluster
    from wpultr.config import config_from_dict
    from wpultr.pipeline.runner import run_pipeline
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    cfg = config_from_dict({"name": "r", "run_dir": str(tmp_path / "{name}"),
                            "data": {"source": "baidu", "train": [str(sample / "train" / "*.gz")],
                                     "annotations": str(tmp_path / "labels.tsv.gz")}})
    before = cluster.local_clusters_started
    with pytest.raises(FileNotFoundError, match=r"^data\.annotations: .*labels\.tsv\.gz: no such file"):
        run_pipeline(cfg)
    cfg = config_from_dict({"name": "r", "run_dir": str(tmp_path / "{name}"),
                            "data": {"source": "baidu", "train": [str(tmp_path / "nope-*.gz")],
                                     "annotations": str(sample / "annotations.tsv.gz")}})
    with pytest.raises(FileNotFoundError, match=r"^data\.train: .*nope-\*\.gz' matches no file"):
        run_pipeline(cfg)
    assert cluster.local_clusters_started == before


@pytest.mark.parametrize("command", [["evaluate"], ["export", "--out", "{tmp}/m"], ["verdict"], ["graph", "show"]])
def test_every_reader_says_not_a_run_directory(tmp_path, command):
    from wpultr.cli import app
    (tmp_path / "plain").mkdir()
    args = [c.replace("{tmp}", str(tmp_path)) for c in command]
    out = CliRunner().invoke(app, [*args[:2 if args[0] == "graph" else 1], str(tmp_path / "plain"),
                                   *args[2 if args[0] == "graph" else 1:]])
    assert out.exit_code == 2 and "not a wpultr run directory" in out.output, out.output
    assert "finished?" not in out.output and len(out.output.strip().splitlines()) == 1


def test_dask_messages_go_to_the_run_directory_not_the_terminal(tmp_path, capsys):
    import logging

    from wpultr.cluster import dask_messages_to
    with dask_messages_to(tmp_path / "logs" / "cluster.log") as path:
        logging.getLogger("distributed.worker").warning("Compute Failed\nKey: x\nTraceback ...")
        logging.getLogger("distributed.nanny").warning("Worker process still alive after 4.0 seconds, killing")
    assert "Compute Failed" in path.read_text() and "still alive" in path.read_text()
    captured = capsys.readouterr()
    assert "Compute Failed" not in captured.err + captured.out


# ---------------------------------------------------------------------------------------------------------------
# The report in a real browser (item 5): headless Chromium, 1 400 px wide
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_the_report_and_compare_page_hold_together_in_headless_chromium(runs, tmp_path):
    from browser import find_browser, probe
    if find_browser() is None:
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium; apt-get install chromium)")
    from wpultr.report.compare import compare_runs, write_html
    bal, naive = runs
    compare_page = write_html(compare_runs([str(naive), str(bal)]), tmp_path / "compare.html")
    for page in (bal / "report.html", compare_page):
        for width in (1280, 1400, 1600):
            found = probe(page, tmp_path, width=width)
            assert found["width"] == width
            assert found["scrollWidth"] <= width and found["overflowing"] == [], (page.name, width, found)
            assert found["images"] and all(w > 0 for _, w in found["images"]), found["images"]   # every one decoded
            assert found["errors"] == [] and found["stderr_errors"] == [], found
            if page.name == "report.html":
                panels = dict(found["panels"])
                assert sorted(panels) == sorted(p.name.split("_")[1] for p in bal.glob("epoch_*"))
                for k, drawn in panels.items():        # the drawn edges are graph.json's, exactly
                    graph = json.loads((bal / f"epoch_{k}" / "graph.json").read_text())
                    assert sorted(map(tuple, drawn)) == sorted((e["from"], e["to"], e["type"]) for e in graph["edges"])
