"""The train stage's identifiability pre-flight: check the IG of the bias factors a method models.

Position-based methods (IPW, Regression-EM, DLA, pairwise debiasing, LightGBM-position, LBD and the
propensity-weighted pairwise ones) model position; BAL models position and the categorical page features
it sees. A disconnected IG means the method cannot separate those factors' effect on clicks from
relevance (Theorem 1); the run records the components, the cheapest swaps and merges, and does what
`identifiability.on_disconnected` says: warn, merge (rewrite the factor columns through the merged mapping
before `fit`), fail, or intervene (simulated logs: add the swaps' sessions).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import ConfigError, WpultrError
from ..rundir.layout import IDENTIFIABILITY_FIGURE
from ..schema import POSITION, SESSION_ID
from ..settings.methods import BACKBONES, METHODS
from .factor_graph import IdentifiabilityGraph, build_graph
from .figure import plot_graph
from .intervention import append_sessions, simulate_interventions
from .repair import apply_merges, mapping_table, merged_mapping, plan_interventions, plan_merges

if TYPE_CHECKING:
    from ..config import RunConfig

log = logging.getLogger(__name__)

MAX_NODES_SHOWN = 8


class IdentifiabilityError(WpultrError):
    """The logs cannot identify relevance for the bias factors a method models (`on_disconnected: fail`)."""


def factor_kinds(cfg: RunConfig) -> dict[str, str]:
    return {f.name: f.kind.value for f in cfg.data.parsed_page_features}


def bias_factors(cfg: RunConfig) -> list[str] | None:
    """The bias factor columns the configured method models (None: it models none, no check)."""
    if cfg.identifiability.factors:
        return list(cfg.identifiability.factors)
    factors = METHODS[cfg.train.method].bias_factors     # its spec's: none, position or its graph's
    if factors == "graph":
        if cfg.bal.graph == "position":            # PB-BAL: position -> click only
            return [POSITION]
        kinds = factor_kinds(cfg)
        seen = cfg.bal.features or list(kinds)
        others = [f for f in seen if f != POSITION and kinds.get(f) == "categorical"]
        return ([POSITION] if POSITION in seen else []) + others or None
    return [POSITION] if factors == "position" else None


def reads_document_only(cfg: RunConfig) -> bool:
    """The ranker scores a document by its doc_id alone (`ranker.backbone: embedding`): the IG's features are
    documents, whichever queries show them, as the paper's one-hot documents are (§5.1)."""
    return BACKBONES[cfg.ranker.backbone].document_only


def describe_components(ig: IdentifiabilityGraph) -> str:
    """`{1, 2, 3} | {4, 5}`: each component's nodes (the first few of a big one)."""
    parts = []
    for members in ig.components():
        names = [ig.node_name(n) for n in members]
        more = [f"… {len(names) - MAX_NODES_SHOWN} more"] if len(names) > MAX_NODES_SHOWN else []
        shown = names[:MAX_NODES_SHOWN] + more
        parts.append("{" + "; ".join(shown) + "}")
    return " | ".join(parts)


def check(frame: pd.DataFrame, factors: list[str], kinds: dict[str, str] | None = None,
          position_weight: float = 10.0, swap_sessions: int | None = None, per_document: bool = False
          ) -> tuple[IdentifiabilityGraph, dict[str, Any]]:
    """(IG, JSON report): components, their sizes and click shares; when disconnected, the swaps (each to be
    shown in `swap_sessions` sessions) and the merges. `per_document`: see graph.document_codes."""
    ig = build_graph(frame, factors, per_document)
    report: dict[str, Any] = ig.summary()
    if not ig.connected:
        report["interventions"] = [s.to_dict() for s in plan_interventions(ig, sessions=swap_sessions)]
        report["merges"] = [m.to_dict() for m in plan_merges(ig, kinds, position_weight)]
    return ig, report


def preflight(frame: pd.DataFrame, cfg: RunConfig, run_root: Path | None = None
              ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(the training frame the method should fit, the report) for the configured method; see the module doc."""
    factors = bias_factors(cfg)
    method = cfg.train.method
    if factors is None:
        return frame, {"checked": False, "reason": f"method {method!r} models no bias factor"}
    settings = cfg.identifiability
    per_document = reads_document_only(cfg)
    ig, report = check(frame, factors, factor_kinds(cfg), settings.position_weight, settings.intervention_sessions,
                       per_document)
    report = {"checked": True, "method": method, "on_disconnected": settings.on_disconnected, **report,
              "action": "none"}
    if run_root is not None:
        plot_graph(ig, Path(run_root) / IDENTIFIABILITY_FIGURE)
        report["figure"] = IDENTIFIABILITY_FIGURE
    if ig.connected:
        return frame, report
    message = (f"identifiability: the bias factors ({', '.join(factors)}) of method {method!r} form "
               f"{ig.n_components} disconnected components {describe_components(ig)}; relevance is not "
               f"identifiable across them (Identifiability Matters, Theorem 1)")
    report["warning"] = message
    log.warning(message)
    action = settings.on_disconnected
    if action == "fail":
        raise IdentifiabilityError(message + "; set identifiability.on_disconnected to warn, merge or intervene")
    if action == "merge":
        merges = plan_merges(ig, factor_kinds(cfg), settings.position_weight)
        mapping = merged_mapping(ig, merges)
        frame = apply_merges(frame, ig, mapping)
        report.update(action="merge", mapping=mapping_table(ig, mapping),
                      components_after=build_graph(frame, factors, per_document).n_components)
    elif action == "intervene":
        if cfg.data.source != "simulate":
            raise ConfigError("identifiability.on_disconnected: 'intervene' needs data.source 'simulate' (the "
                              f"simulator plays the online swaps); got data.source {cfg.data.source!r}; allowed "
                              "here: warn, merge, fail")
        swaps = plan_interventions(ig, sessions=settings.intervention_sessions)
        extra = simulate_interventions(cfg.data.simulate, cfg.seed, swaps, factors, settings.intervention_sessions,
                                       int(frame[SESSION_ID].max()) + 1)
        frame = append_sessions(frame, extra)
        report.update(action="intervene", intervention_sessions=int(extra[SESSION_ID].nunique()),
                      intervention_rows=int(len(extra)),
                      components_after=build_graph(frame, factors, per_document).n_components)
    return frame, report


def summary_entry(report: dict[str, Any]) -> dict[str, Any]:
    """The part of the report that goes into the run's summary.json (the train stage's record)."""
    if not report.get("checked"):
        return {"checked": False, "reason": report.get("reason", "")}
    keep = ("factors", "connected", "n_components", "largest_click_share", "action", "components_after", "warning")
    entry = {k: report[k] for k in keep if k in report}
    entry["components"] = [c["nodes"] for c in report.get("components", [])]
    return entry
