"""bench/bal.py's report helpers: --resume (a method whose per-query table an earlier run wrote is read back, not
trained again, so a cut run goes on and the ceilings can be added to an old run on the same logs), --timing-rounds
(each method timed again in reversed order) and the share of the baseline → ceiling gap (defined only where the
ceiling is significantly above the baseline)."""
from __future__ import annotations

import argparse

import pandas as pd

from bench_scripts import load_bench_script


def _bench():
    return load_bench_script("bal")


def test_resume_reads_back_what_an_earlier_run_scored_and_trains_only_the_rest(tmp_path, capsys):
    bench = _bench()
    args = argparse.Namespace(sessions=300, epochs=1, methods=["Naive"], no_references=True, no_oracle=True,
                              per_query_dir=str(tmp_path), resume=False)
    first = bench.one_seed("default", 0, args)
    assert (tmp_path / "default__seed0__Naive.csv").is_file()
    assert first["seconds"]["Naive"] > 0

    args.resume, args.methods = True, ["Naive", "Naive-list"]
    capsys.readouterr()
    again = bench.one_seed("default", 0, args)
    printed = capsys.readouterr().out
    assert "Naive          DCG@10" in printed and "(read back: --resume)" in printed
    pd.testing.assert_frame_equal(again["per_query"]["Naive"], first["per_query"]["Naive"], check_dtype=False)
    assert pd.isna(again["seconds"]["Naive"])              # not trained again ...
    assert again["seconds"]["Naive-list"] > 0              # ... while a method the directory lacks is
    assert (tmp_path / "default__seed0__Naive-list.csv").is_file()
    p, diff, n = bench.paired_test(again["per_query"]["Naive-list"], again["per_query"]["Naive"], "DCG@10", "all")
    assert n == len(first["per_query"]["Naive"])           # read-back and fresh tables pair up query by query


def test_the_share_of_the_gap_is_defined_only_where_the_ceiling_is_significantly_above_the_baseline():
    bench = _bench()
    assert bench.gap_closed(10.5, 10.0, 11.0, ceiling_p=0.01) == 0.5
    assert pd.isna(bench.gap_closed(10.5, 10.0, 11.0, ceiling_p=0.30))    # a gap the test cannot tell from noise
    assert pd.isna(bench.gap_closed(10.5, 10.0, 9.9, ceiling_p=0.01))     # the ceiling below: nothing to recover
    assert pd.isna(bench.gap_closed(10.5, 10.0, 10.0, ceiling_p=0.01))


def test_timing_rounds_fit_again_in_reversed_order_and_average_the_seconds(monkeypatch, capsys):
    bench = _bench()
    order, real = [], bench.fit_method
    monkeypatch.setattr(bench, "fit_method", lambda label, *a: order.append(label) or real(label, *a))
    args = argparse.Namespace(sessions=300, epochs=1, methods=["Naive", "Naive-list"], no_references=True,
                              no_oracle=True, per_query_dir=None, resume=False, timing_rounds=3)
    out = bench.one_seed("default", 0, args)
    assert order == ["Naive", "Naive-list", "Naive-list", "Naive", "Naive", "Naive-list"]
    for label in args.methods:
        assert len(out["rounds"][label]) == 3 and all(s > 0 for s in out["rounds"][label])
        assert out["seconds"][label] == sum(out["rounds"][label]) / 3
    assert bench.round_ratios(out["rounds"], "Naive-list") == [a / b for a, b in zip(out["rounds"]["Naive-list"],
                                                                                     out["rounds"]["Naive"],
                                                                                     strict=True)]
