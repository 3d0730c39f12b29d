"""What the in-process reproduction drivers (bench/pairwise_size.py, bench/prs_probe.py) share: an experiment YAML's
run configs for one (setting, seed), the split, fitting and scoring of one method on one log, the paired test's
record, and the summary over seeds of their one-JSON-line-per-log output."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wpultr.config import config_from_dict
from wpultr.evaluation.metrics import paired_test, per_query
from wpultr.experiment.spec import load_experiment
from wpultr.io.split import split_queries
from wpultr.rankers.base import score_frame
from wpultr.schema import query_key
from wpultr.settings.methods import get_method

ALPHA = 0.05


def run_configs(yaml: Path, setting: str, seed: int, overrides: dict[str, Any], methods: list[str]) -> dict[str, Any]:
    """Each method's resolved run config for (setting, seed), as the harness resolves it: the YAML's base with
    `overrides` (experiment keys, e.g. `base.train.epochs`), then the setting's own keys, then the method's."""
    exp = load_experiment(yaml, {"seeds": [seed], **overrides})
    runs = {r.label: r.config for r in exp.runs if r.setting == setting and r.label in methods}
    missing = set(methods) - set(runs)
    if missing:
        raise SystemExit(f"no run for {sorted(missing)} in setting {setting!r} (settings and labels: the YAML)")
    return {m: config_from_dict(runs[m]) for m in methods}


def validation_and_test(annotations: pd.DataFrame, valid_fraction: float, seed: int) -> tuple[pd.DataFrame,
                                                                                           pd.DataFrame]:
    """(validation, test) annotated rows, the queries drawn as the split stage draws them (`io.split.split_queries`)."""
    valid_q, test_q = split_queries(annotations, valid_fraction, seed)
    keys = query_key(annotations)
    return annotations[keys.isin(valid_q)], annotations[keys.isin(test_q)].reset_index(drop=True)


def fit_and_score(cfg: Any, frame: pd.DataFrame, valid: pd.DataFrame, test: pd.DataFrame,
                  ks: tuple[int, ...]) -> tuple[Any, pd.DataFrame, float]:
    """One run config's method fitted on `frame` (model selection on `valid`), its ranker scored on the test rows:
    (the fit's result, the per-query metrics at `ks`, seconds it took)."""
    start = time.perf_counter()
    result = get_method(cfg.train.method).fit(frame, valid, cfg)
    scored = test.assign(score=score_frame(result.ranker, test, cfg.train.batch_size))
    return result, per_query(scored, "score", ks=ks), time.perf_counter() - start


def paired_entry(table: pd.DataFrame, base: pd.DataFrame) -> dict[str, float]:
    """A record's "paired" entry, `table` − `base` over the same test queries (`metrics.paired_test` on nDCG@10):
    what `print_summary` reads."""
    p, diff, n = paired_test(table, base, "nDCG@10", "all")
    return {"diff": diff, "p": p, "n": n}


def _std(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def print_summary(path: Path, group_of: Callable[[dict[str, Any]], tuple[Hashable, ...]],
                  title: Callable[[tuple[Hashable, ...]], str]) -> None:
    """Mean ± std over seeds of each method's nDCG@10 and of each paired difference, with how many seeds it is
    significantly better / worse in and the per-seed differences (* p < 0.05), for each group of lines of `path`
    (`group_of` a line's key); a seed written twice counts once (its last line)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(group_of(r), []).append(r)
    for key, rs in sorted(groups.items(), key=lambda kv: json.dumps(kv[0])):
        rs = sorted({r["seed"]: r for r in rs}.values(), key=lambda r: r["seed"])
        print(f"{title(key)} seeds={[r['seed'] for r in rs]}")
        for label in rs[0]["methods"]:
            v = [r["methods"][label]["nDCG@10"] for r in rs if label in r["methods"]]
            print(f"   {label:<20} nDCG@10 {np.mean(v):.4f} ± {_std(v):.4f}")
        for pair in rs[0]["paired"]:
            tests = [r["paired"][pair] for r in rs if pair in r["paired"]]
            d = [t["diff"] for t in tests]
            better = sum(t["p"] < ALPHA and t["diff"] > 0 for t in tests)
            worse = sum(t["p"] < ALPHA and t["diff"] < 0 for t in tests)
            marks = " ".join(f"{t['diff']:+.4f}{'*' if t['p'] < ALPHA else ''}" for t in tests)
            print(f"   {pair:<32} {np.mean(d):+.4f} ± {_std(d):.4f}  better/worse/seeds {better}/{worse}/{len(tests)}"
                  f"   per seed: {marks}")


def add_output_arguments(parser: Any, default_out: str, set_example: str) -> None:
    """The options both drivers take: `--set` run-config overrides, the JSON-lines `--out` file and `--summary`."""
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help=f"run-config override on the YAML's base, e.g. {set_example}")
    parser.add_argument("--out", type=Path, default=Path(default_out))
    parser.add_argument("--summary", type=Path, default=None, help="print mean ± std over seeds of a --out file")


OUT_COMMAND = "bench seed-table driver --out"   # what --out may append to: a file these drivers wrote (its manifest)


def check_out(path: str | Path) -> Path:
    """The --out file as the local path it names (a file:// URL too), or SystemExit with one line when it exists and
    is not these drivers' own earlier output (wpultr.rundir.ownership: listed with its sha256 beside it)."""
    from wpultr.errors import WpultrError
    from wpultr.rundir.files import check_output
    from wpultr.rundir.ownership import output_of, output_path
    try:
        path = output_path(path, "--out")
        check_output(path, output_of(OUT_COMMAND), key="--out")
    except WpultrError as error:
        raise SystemExit(f"error: {error}") from None
    return path


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """One log's result as one JSON line of `path` (created with its folder), so a cut run keeps what it finished;
    only a file these drivers wrote is appended to, and its manifest entry follows each line."""
    from wpultr.rundir.ownership import normalise
    from wpultr.rundir.ownership import record as own
    path = check_out(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    own(normalise(path), OUT_COMMAND)
