"""The experiment report says in words, above Table 1, when a claim does not show (issue 47): a variant identical
to another (with the features the runs set aside), a ceiling without headroom, BAL not above its best baseline.
Small result fixtures (metrics.json, eval/per_query.parquet, train/bias.json): no run is trained."""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from wpultr.experiment import experiment_from_dict
from wpultr.experiment.report import CLAIMS_MD, TABLES_MD, write_experiment_report
from wpultr.experiment.spec import RunRecord
from wpultr.rundir import layout as L
from wpultr.schema import QUERY_ID

METRICS = [f"{m}@{k}" for m in ("DCG", "ERR") for k in (1, 3, 5, 10)]
SEEDS = [0, 1, 2]
QUERIES = 60


def experiment(out_dir: Path):
    return experiment_from_dict({
        "name": "claims", "out_dir": str(out_dir), "seeds": SEEDS,
        "base": {"data": {"source": "simulate"}, "ranker": {"backbone": "mlp", "head": [8]}},
        "methods": [
            {"label": "Naive", "overrides": {"train.method": "naive"}},
            {"label": "BAL", "overrides": {"train.method": "bal"}},
            {"label": "BAL-pos", "overrides": {"train.method": "bal", "bal.features": ["position"]}},
            {"label": "Ceiling", "overrides": {"train.method": "naive", "data.clicks": "unbiased"}},
        ],
        "tables": {"baseline": "Naive", "table1": ["Naive", "BAL", "Ceiling"], "table3": ["BAL-pos", "BAL"],
                   "fig4": [], "fig5": [], "fig3": []},
    })


def write_run(run_dir: Path, dcg10: np.ndarray, set_aside: list[str] | None = None) -> None:
    """One finished run's files the report reads: per-query metrics (every metric moves with DCG@10), their means,
    and, for a BAL run, the separability record of train/bias.json."""
    frame = pd.DataFrame({QUERY_ID: [f"q{i}" for i in range(QUERIES)],
                          **{m: dcg10 * (0.1 if m.startswith("ERR") else 1.0) for m in METRICS}})
    (run_dir / "eval").mkdir(parents=True)
    frame.to_parquet(run_dir / L.PER_QUERY)
    (run_dir / L.METRICS).write_text(json.dumps({"all": {m: float(frame[m].mean()) for m in METRICS}}))
    if set_aside is not None:
        (run_dir / "train").mkdir()
        (run_dir / L.BIAS).write_text(json.dumps({"separability": {
            "checked": True, "min_within_document_share": 0.05, "set_aside": set_aside,
            "within_document_share": {"position": 0.61, "media_type": 0.0}}}))


def report(tmp_path: Path, ceiling_gain: float, bal_pos_shift: float) -> tuple[str, str, str]:
    """Write the fixtures and the report; (tables.md, claims.md, report.html)."""
    exp = experiment(tmp_path / "claims")
    records = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        naive = rng.uniform(5, 20, QUERIES)
        bal = naive + rng.normal(0, 1.0, QUERIES)                       # no better than Naive
        runs = {"Naive": (naive, None), "BAL": (bal, ["media_type"]),
                "BAL-pos": (bal + bal_pos_shift, ["media_type"]),
                "Ceiling": (naive + ceiling_gain + rng.normal(0, 1.0, QUERIES), None)}
        for spec in (r for r in exp.runs if r.seed == seed):
            write_run(spec.run_dir, *runs[spec.label])
            records.append(RunRecord(spec.setting, spec.label, seed, str(spec.run_dir), "ok", 1.0))
    path = write_experiment_report(exp, records)
    return ((exp.out_dir / TABLES_MD).read_text(), (exp.out_dir / CLAIMS_MD).read_text(), path.read_text())


def test_report_names_an_identical_variant_and_a_ceiling_without_headroom(tmp_path):
    tables, claims, html = report(tmp_path, ceiling_gain=0.0, bal_pos_shift=0.0)
    assert "BAL-pos is identical to BAL" in claims
    assert "BAL and BAL-pos set media_type aside in seed(s) 0, 1, 2 (within-document share 0.000 < 0.05" in claims
    assert ("No headroom: the unbiased-click ceiling Ceiling (Naive on clicks with no bias) is not significantly "
            "above Naive") in claims
    assert "BAL is not significantly above its best baseline Naive" in claims
    assert "no headroom over Naive" in claims
    assert claims.strip() in tables and tables.index("does not show") < tables.index("Table 1")
    assert "BAL-pos is identical to BAL" in html and "does not show" in html
    assert html.index("What the tables show") < html.index("Table 1")


def test_report_says_when_the_claims_show(tmp_path):
    _, claims, _ = report(tmp_path, ceiling_gain=3.0, bal_pos_shift=0.5)
    assert "identical" not in claims
    assert "Headroom: the unbiased-click ceiling Ceiling is significantly above Naive" in claims
    assert "significantly better in 3/3 seeds" in claims
    assert "No headroom" not in claims
