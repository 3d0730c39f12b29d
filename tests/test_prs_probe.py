"""bench/prs_probe.py: the PRS study's pair weightings fitted in process on one log, from the YAML's own run configs;
the oracle leaves out exactly the skipped relevant results; the summary counts significant seeds."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from bench_scripts import load_bench_script

SMALL = {"data.simulate.n_queries": 60, "data.simulate.n_sessions": 900, "data.simulate.n_annotated_queries": 30,
         "data.simulate.docs_per_query": 10, "train.epochs": 1}


def _probe():
    return load_bench_script("prs_probe")


def test_the_probe_fits_the_yamls_configs_and_pairs_them_on_the_same_test_queries(tmp_path, capsys):
    probe = _probe()
    small = {f"base.{k}": v for k, v in SMALL.items()}
    configs = probe.run_configs(probe.YAML, "eta2", 3, small, ["IPS-LR", "PRS-LR"])
    assert configs["IPS-LR"].prs.weighting == "ips" and configs["IPS-LR"].propensity.clip == 0.05
    assert configs["PRS-LR"].prs.weighting == "prs" and configs["PRS-LR"].seed == 3
    assert configs["PRS-LR"].data.simulate.user_model_params["eta"] == 2.0          # the setting's overrides
    assert configs["PRS-LR"].data.simulate.n_sessions == 145_000     # a setting's own keys win over --set ...
    default = probe.run_configs(probe.YAML, "eta1_mu0.1", 0, small, ["IPS-LR"])["IPS-LR"]
    assert default.data.simulate.n_sessions == 900                        # ... the others' base takes them
    with pytest.raises(SystemExit, match="No-such"):
        probe.run_configs(probe.YAML, "eta2", 0, small, ["No-such"])

    args = argparse.Namespace(methods=["IPS-LR", "PRS-LR"], oracle=True, full_info=True, sets=SMALL)
    record = probe.one_log("eta1_mu0.1", 0, args)
    assert list(record["methods"]) == ["IPS-LR", "PRS-LR", probe.ORACLE, "Full-Info-LR"]
    assert set(record["paired"]) == {"PRS-LR - IPS-LR", f"{probe.ORACLE} - IPS-LR", "Full-Info-LR - IPS-LR"}
    assert all(p["n"] == record["test_queries"] > 0 for p in record["paired"].values())
    assert 0 < record["relevant_skipped_rows"] < record["sessions"] * 10
    out = tmp_path / "probe.jsonl"
    out.write_text(json.dumps(record) + "\n" + json.dumps({**record, "seed": 1}) + "\n")
    probe.summary(out)
    printed = capsys.readouterr().out
    assert "seeds=[0, 1]" in printed and "better/worse/seeds" in printed and "/2 " in printed


def test_the_full_info_skyline_trains_each_learners_naive_config_on_every_shown_results_true_relevance():
    probe = _probe()
    assert probe.full_info_runs(["IPS-LR", "PRS-LambdaMART", "PRS-LR"]) == [
        ("Full-Info-LR", "Naive-LR"), ("Full-Info-LambdaMART", "Naive-LambdaMART")]
    assert probe.full_info_runs(["IPS-LambdaMART"]) == [("Full-Info-LambdaMART", "Naive-LambdaMART")]
    sessions = pd.DataFrame({"session_id": [1, 1, 1, 2, 2, 2], "position": [1, 2, 3, 1, 2, 3],
                             "click": np.array([1, 0, 0, 0, 0, 1], dtype=np.int8)})
    grades = np.array([4, 3, 0, 2, 3, 1])
    labelled = probe.full_info_frame(sessions, grades)
    # clicked-but-irrelevant becomes 0, skipped-but-relevant becomes 1; nothing else moves, the log is untouched
    assert labelled["click"].tolist() == [1, 1, 0, 0, 1, 0] and labelled["click"].dtype == np.int8
    assert labelled[["session_id", "position"]].equals(sessions[["session_id", "position"]])
    assert sessions["click"].tolist() == [1, 0, 0, 0, 0, 1]
