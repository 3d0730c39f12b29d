"""What an experiment's Table 1 claims and whether its runs show it, in words above the tables (issue 47).

Three claims, each checked on the finished runs of one setting, each with the reason the runs recorded when it
does not show:

* **headroom**: a ceiling (a method run with `data.clicks: unbiased`: the same shown results, clicks with no bias)
  is significantly above the same method on the logged clicks. Where it is not, the logs carry no measurable
  cost of bias, and no debiasing method can show a gain over that method.
* **identical variants**: two methods whose every test query scored the same on every seed both finished are one
  result, not two (BAL = BAL-pos when BAL set the other page features aside). The reason is what the runs'
  `train/bias.json` recorded: the features set aside as not separable from relevance (`separability`).
* **BAL above its best baseline**: each BAL row of Table 1 (`train.method: bal` with the discovered graph and
  every page feature) against every other row but the ceilings, by a paired t-test over the test queries per seed;
  the claim shows when BAL is significantly above the best baseline (the non-BAL row with the highest mean) in
  the significance rule's share of seeds.
"""
from __future__ import annotations

import html
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..rundir.files import read_json
from ..rundir.layout import BIAS
from ..settings.methods import learns_graph
from .paper_tables import Column, SettingResults, significance_rows
from .spec import Experiment

CLAIM_METRIC = "DCG@10"          # BAL §4.1 selects epochs by it; the claims are judged on it


@dataclass
class Claim:
    """One claim about one setting: what it says, whether the runs show it, and the sentence that says so."""
    kind: str                     # headroom | identical | above_baseline
    subject: str                  # the method label the claim is about
    shows: bool
    text: str
    details: list[str] = field(default_factory=list)    # per rival: Δ and seeds better/worse/compared


@dataclass(frozen=True)
class Comparison:
    """`label` against `other` per seed on one metric: mean difference, seeds better / worse / compared."""
    label: str
    other: str
    diff: float
    better: int
    worse: int
    compared: int

    def sentence(self) -> str:
        return (f"{self.label} vs {self.other}: {self.diff:+.3f} {CLAIM_METRIC}, significantly better in "
                f"{self.better}/{self.compared} seeds, worse in {self.worse}/{self.compared}")


def compare(results: SettingResults, label: str, other: str, alpha: float, metric: str = CLAIM_METRIC) -> Comparison:
    rows = significance_rows(results, label, other, [Column("all", metric)])
    diffs = [r["mean_diff"] for r in rows if not math.isnan(r["mean_diff"])]
    return Comparison(label, other, float(np.mean(diffs)) if diffs else float("nan"),
                      sum(r["p"] < alpha and r["mean_diff"] > 0 for r in rows),
                      sum(r["p"] < alpha and r["mean_diff"] < 0 for r in rows), len(rows))


def _needed(compared: int, rule: str) -> int:
    return compared if rule == "all" else compared // 2 + 1


def _config(exp: Experiment, setting: str, label: str) -> dict[str, Any] | None:
    for run in exp.runs_of(setting):
        if run.label == label and run.config:
            return run.config
    return None


def is_ceiling(config: dict[str, Any] | None) -> bool:
    return bool(config) and config["data"].get("clicks") == "unbiased"


def _without_clicks(config: dict[str, Any]) -> dict[str, Any]:
    data = {k: v for k, v in config["data"].items() if k != "clicks"}
    return {**{k: v for k, v in config.items() if k not in ("name", "run_dir", "seed", "data")}, "data": data}


def ceiling_reference(exp: Experiment, setting: str, ceiling: str) -> str | None:
    """The label run exactly as `ceiling` is but on the logged clicks (Naive for a Naive ceiling), if any."""
    target = _without_clicks(_config(exp, setting, ceiling))
    for label in exp.labels:
        config = _config(exp, setting, label)
        if label != ceiling and config and not is_ceiling(config) and _without_clicks(config) == target:
            return label
    return None


def is_headline_bal(config: dict[str, Any] | None) -> bool:
    """BAL as the paper runs it: the discovered graph over every page feature, on the logged clicks."""
    return (bool(config) and learns_graph(config["train"]["method"]) and not is_ceiling(config)
            and config["bal"]["graph"] == "discovered" and not config["bal"].get("features"))


def identical(results: SettingResults, a: str, b: str) -> bool:
    """Every metric of every test query equal on every seed both finished (at least one)."""
    seeds = sorted(set(results.seeds(a)) & set(results.seeds(b)))
    if not seeds:
        return False
    for seed in seeds:
        x, y = results.per_query(a, seed), results.per_query(b, seed)
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            return False
        if not x.reset_index(drop=True).equals(y.reset_index(drop=True)):
            return False
    return True


def set_aside(results: SettingResults, label: str) -> dict[str, tuple[tuple[int, ...], float, float]]:
    """The page features a BAL run's `train/bias.json` recorded as set aside (`separability`: not separable from
    relevance, so not corrected): per feature, the seeds, its within-document share and the threshold."""
    found: dict[str, list[int]] = {}
    shares: dict[str, tuple[float, float]] = {}
    for seed in results.seeds(label):
        path = Path(results.runs[(label, seed)]) / BIAS
        record = (read_json(path).get("separability") or {}) if path.exists() else {}
        for name in record.get("set_aside") or []:
            found.setdefault(name, []).append(seed)
            shares[name] = (float(record.get("within_document_share", {}).get(name, float("nan"))),
                            float(record.get("min_within_document_share", float("nan"))))
    return {name: (tuple(seeds), *shares[name]) for name, seeds in found.items()}


def recorded_reasons(results: SettingResults, *labels: str) -> list[str]:
    """One sentence per feature the runs of `labels` set aside (labels that set aside the same, named together)."""
    records = {label: set_aside(results, label) for label in labels}
    reasons = []
    for name in dict.fromkeys(n for record in records.values() for n in record):
        holders = [label for label in labels if name in records[label]]
        seeds, share, threshold = records[holders[0]][name]
        reasons.append(f"{' and '.join(holders)} set {name} aside in seed(s) {_seeds(seeds)} (within-document share "
                       f"{share:.3f} < {threshold:g}: fixed for the same document, its effect on clicks cannot be told "
                       f"from relevance), so {'they do' if len(holders) > 1 else 'it does'} not correct it")
    return reasons


def _seeds(seeds: Sequence[int]) -> str:
    return ", ".join(str(s) for s in sorted(seeds))


def setting_claims(exp: Experiment, setting: str, results: SettingResults, table1: Sequence[str]) -> list[Claim]:
    """The claims of one setting's Table 1 and whether its finished runs show them (see the module docstring)."""
    alpha, rule = exp.spec.significance.alpha, exp.spec.significance.rule
    claims: list[Claim] = []
    configs = {label: _config(exp, setting, label) for label in exp.labels}
    ceilings = [label for label in exp.labels if is_ceiling(configs[label]) and results.has(label)]
    no_headroom: list[str] = []
    for ceiling in ceilings:
        reference = ceiling_reference(exp, setting, ceiling)
        if reference is None or not results.has(reference):
            continue
        c = compare(results, ceiling, reference, alpha)
        shows = c.compared > 0 and c.better >= _needed(c.compared, rule)
        if shows:
            text = (f"Headroom: the unbiased-click ceiling {ceiling} is significantly above {reference} "
                    f"({c.sentence()}).")
        else:
            no_headroom.append(reference)
            text = (f"No headroom: the unbiased-click ceiling {ceiling} ({reference} on clicks with no bias) is not "
                    f"significantly above {reference} ({c.sentence()}): by this measure the logs carry no cost of "
                    f"bias for a debiasing method to recover over {reference}.")
        claims.append(Claim("headroom", ceiling, shows, text))

    identical_to: dict[str, list[str]] = {}
    finished = [label for label in exp.labels if results.has(label)]
    for a, b in itertools.combinations(finished, 2):
        if identical(results, a, b):
            identical_to.setdefault(a, []).append(b)
            identical_to.setdefault(b, []).append(a)
            reasons = recorded_reasons(results, a, b)
            why = ("; ".join(reasons) + ".") if reasons else "the runs recorded no reason."
            seeds = sorted(set(results.seeds(a)) & set(results.seeds(b)))
            claims.append(Claim("identical", b, False,
                                f"{b} is identical to {a}: every test query scored the same in seed(s) "
                                f"{_seeds(seeds)}, so the two rows are one result. Why: {why}"))

    rows = [label for label in table1 if results.has(label) and not is_ceiling(configs.get(label))]
    for label in [r for r in rows if is_headline_bal(configs.get(r))]:
        baselines = [r for r in rows if configs.get(r) and not learns_graph(configs[r]["train"]["method"])]
        if not baselines:
            continue
        means = {r: _mean(results, r) for r in baselines}
        best = max(baselines, key=lambda r: -math.inf if math.isnan(means[r]) else means[r])
        comparisons = [compare(results, label, other, alpha) for other in rows if other != label]
        to_best = next(c for c in comparisons if c.other == best)
        shows = to_best.compared > 0 and to_best.better >= _needed(to_best.compared, rule)
        if shows:
            text = f"{label} is significantly above its best baseline {best} ({to_best.sentence()})."
            if no_headroom:
                text += (f" The ceiling shows no headroom over {', '.join(no_headroom)} nonetheless: it is that "
                         "method trained on unbiased clicks, not a bound on what a ranker can reach on these logs.")
        else:
            why = recorded_reasons(results, label)
            why += [f"{label} is identical to {', '.join(identical_to[label])}"] if label in identical_to else []
            why += [f"no headroom over {r} (see above)" for r in no_headroom]
            text = (f"{label} is not significantly above its best baseline {best} ({to_best.sentence()}). Why: "
                    + ("; ".join(why) + "." if why else "the runs recorded no reason (no feature set aside, a "
                       "ceiling above Naive where one ran): on these logs its correction did not pay."))
        claims.append(Claim("above_baseline", label, shows, text, [c.sentence() for c in comparisons]))
    return claims


def _mean(results: SettingResults, label: str, metric: str = CLAIM_METRIC) -> float:
    values = [(results.metrics(label, s).get("all") or {}).get(metric) for s in results.seeds(label)]
    values = [float(v) for v in values if v is not None]
    return float(np.mean(values)) if values else float("nan")


def claims_markdown(claims: Sequence[Claim]) -> str:
    """The claims section of tables.md: the ones that do not show first, each a sentence; BAL's comparisons."""
    if not claims:
        return ""
    lines = ["### What the tables show", ""]
    for claim in sorted(claims, key=lambda c: c.shows):
        lines.append(f"- {'shows' if claim.shows else '**does not show**'}: {claim.text}")
        lines += [f"  - {d}" for d in claim.details]
    return "\n".join(lines) + "\n"


def claims_html(claims: Sequence[Claim]) -> str:
    if not claims:
        return ""
    items = []
    for claim in sorted(claims, key=lambda c: c.shows):
        verdict = "shows" if claim.shows else "<b>does not show</b>"
        details = ("<ul>" + "".join(f"<li>{html.escape(d)}</li>" for d in claim.details) + "</ul>"
                   if claim.details else "")
        items.append(f"<li class='{'shows' if claim.shows else 'not-shown'}'>{verdict}: "
                     f"{html.escape(claim.text)}{details}</li>")
    return f"<section><h3>What the tables show</h3><ul>{''.join(items)}</ul></section>"
