"""bench/pairwise_size.py: ULM and RULM (paper 004) fitted in process on one log per (setting, lists, seed), from the
YAML's own run configs: the size arithmetic, unseen test queries, the label-trained bound on true grades, the
paired tests over the same test queries, and the summary's grouping by size and number of annotated queries."""
from __future__ import annotations

import argparse
import json

from bench_scripts import load_bench_script

TINY = {"train.epochs": 1,
        "ranker.lightgbm.rounds_per_epoch": 5, "ranker.lightgbm.rounds": 10, "ranker.lightgbm.eval_points": 1,
        "data.simulate.logging_ranker": "linear", "data.simulate.logging_noise": 0.0}


def _driver():
    return load_bench_script("pairwise_size")


def test_a_size_holds_that_many_training_lists_and_the_test_queries_stay_unseen(tmp_path, capsys):
    size = _driver()
    configs = size.run_configs("independent_10", 4000, 2, 16, 400, TINY, ["ULM", "RULM"])
    sim = configs["ULM"].data.simulate
    assert (sim.n_queries, sim.n_annotated_queries, sim.n_sessions) == (250 + 400, 400, 10_400)  # 16 lists a query
    assert sim.user_model == "pbm" and configs["RULM"].seed == 2

    args = argparse.Namespace(methods=["ULM", "RULM", "LambdaMART-labels"], replays=4, annotated=40, unseen=True,
                              labels_once=True, sets=TINY)
    record = size.one_log("continuous_10", 240, 0, args)
    assert record["annotated"] == 40 and record["unseen"]
    assert 200 <= record["train_lists"] <= 280          # 60 training queries x 4 lists, annotated queries' dropped
    assert record["test_queries"] == 28                 # valid_fraction 0.3 of the 40 annotated validate
    assert list(record["methods"]) == ["ULM", "RULM", "LambdaMART-labels"]
    assert set(record["paired"]) == {"RULM - ULM", "LambdaMART-labels - ULM", "LambdaMART-labels - RULM"}
    assert all(p["n"] == 28 for p in record["paired"].values())
    assert all(len(per_query) == 28 for per_query in record["per_query"].values())

    out = tmp_path / "size.jsonl"
    old = {k: v for k, v in record.items() if k != "annotated"}       # a line written before the key existed
    out.write_text("\n".join(json.dumps(r) for r in (old, {**old, "seed": 1}, {**record, "annotated": 2000})) + "\n")
    size.summary(out)
    printed = capsys.readouterr().out
    assert "lists=240 annotated=400 unseen=True" in printed and "seeds=[0, 1]" in printed
    assert "lists=240 annotated=2000 unseen=True" in printed and "seeds=[0]" in printed
