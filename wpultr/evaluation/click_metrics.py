"""Label-free evaluation: how well each click model of a run predicts the clicks of held-out sessions.

The definitions (log-likelihood, perplexity by position) are `metrics.click_log_likelihood` and
`metrics.click_perplexity`; this module turns a finished run into click probabilities p(click) per shown result:

* ``ctr``: the per-position click-through rate of the training sessions (always available, needs no ranker).
* ``bal``: BAL's click model p = σ(u)·σ(v), u = α·r̂ + β with the (α, β) of the click model fitted in the epoch that
  produced the saved ranker (`train/history.json`), σ(v) the page term; a run saves σ(v) only as its mean by
  position relative to position 1 (`examination_by_position`), so σ(v) = s·e_k with the one level s fitted by
  maximum likelihood on training clicks (page features beyond position are not kept by a run).
* ``position_based`` (DLA, REM, IPW, … — every method whose `train/bias.json` holds `propensities` θ_k, relative to
  position 1): REM p = θ_k·σ(score), its θ as fitted (`theta`) and σ(score) its relevance probability γ, nothing
  fitted; another pointwise method p = s·θ_k·σ(score) (s fitted as above); a listwise or pairwise one (DLA, IPW's
  softmax), whose scores are only ordered, p = θ_k·σ(a·score + b) with (a, b) a monotone (logistic) calibration
  fitted by maximum likelihood on training clicks, per run.
* ``truth``: the simulator's click probability of each shown result, when the run's logs were simulated and the
  held-out rows are found in its truth (the floor a fitted model cannot beat but by noise).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize, minimize_scalar
from scipy.special import expit

from ..features.lexical import LexicalFeaturizer
from ..io.parquet import column_names, read_table, sample_sessions
from ..io.train_input import arrow_lists, read_sampled_sessions, training_columns
from ..rankers.base import score_frame
from ..rankers.registry import load_ranker
from ..rundir.epochs import is_graph_epoch, shipped
from ..rundir.files import RunDir, read_json
from ..rundir.layout import BIAS, HISTORY, LEXICAL_STATE, RANKER_DIR, TRUTH_DIR, TRUTH_SESSIONS
from ..rundir.tables import training_tables
from ..schema import CLICK, DOC_ID, FEATURES, POSITION, SESSION_ID, SchemaError
from ..settings.methods import METHODS, WHOLE_PAGE
from .metrics import CLICK_PROB_EPS, click_log_likelihood, click_perplexity

if TYPE_CHECKING:
    from ..config import RunConfig

TRUE_CLICK_PROB = "click_prob"                   # simulate.generate.CLICK_PROB
POINTWISE = "pointwise"
FIT_SESSIONS = 20_000        # training sessions (a seeded sample) that CTRs and calibrations are fitted on
HELDOUT_SESSIONS = 100_000   # held-out sessions (a seeded sample) scored, so memory does not grow with the log
log = logging.getLogger(__name__)


def _clipped(p: np.ndarray) -> np.ndarray:
    return np.clip(p, CLICK_PROB_EPS, 1.0 - CLICK_PROB_EPS)


def _negative_log_likelihood(p: np.ndarray, clicks: np.ndarray) -> float:
    p = _clipped(p)
    return -float(np.sum(clicks * np.log(p) + (1.0 - clicks) * np.log1p(-p)))


def position_ctr(clicks: np.ndarray, positions: np.ndarray) -> dict[int, float]:
    """Click-through rate of each position: the baseline click model (clicks / impressions at position k)."""
    levels, where = np.unique(np.asarray(positions), return_inverse=True)
    ctr = np.bincount(where, np.asarray(clicks, np.float64)) / np.bincount(where)
    return {int(k): float(v) for k, v in zip(levels, ctr, strict=True)}


def by_position(table: dict[int, float], positions: np.ndarray) -> np.ndarray:
    """table[k] for every position k; a position the table lacks takes the nearest lower one's value (else the
    lowest position's): a run's propensities stop at the deepest position it trained on."""
    known = np.array(sorted(table))
    values = np.array([table[int(k)] for k in known], np.float64)
    at = np.clip(np.searchsorted(known, np.asarray(positions), side="right") - 1, 0, len(known) - 1)
    return values[at]


def fit_examination_level(clicks: np.ndarray, exam: np.ndarray, relevance: np.ndarray) -> float:
    """The s maximising the likelihood of p = s·exam·relevance (s in (0, 1 / max(exam·relevance)]): the
    examination at position 1 that propensities relative to position 1 leave out."""
    c = np.asarray(clicks, np.float64)
    base = np.asarray(exam, np.float64) * np.asarray(relevance, np.float64)
    top = 1.0 / max(float(base.max()), 1e-12)
    found = minimize_scalar(lambda s: _negative_log_likelihood(s * base, c), bounds=(1e-6, top), method="bounded")
    return float(found.x)


def fit_logistic_calibration(clicks: np.ndarray, exam: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """(a, b), a >= 0, maximising the likelihood of p = exam·σ(a·score + b): a monotone map from a ranker's
    uncalibrated scores to a relevance probability (scores standardised first, so one fit serves any scale)."""
    c, e, s = (np.asarray(x, np.float64) for x in (clicks, exam, scores))
    mean, sd = float(s.mean()), float(s.std()) or 1.0
    z = (s - mean) / sd

    def loss(params: np.ndarray) -> float:
        return _negative_log_likelihood(e * expit(params[0] * z + params[1]), c)

    found = minimize(loss, np.array([1.0, 0.0]), method="L-BFGS-B", bounds=[(0.0, None), (None, None)])
    a, b = (float(v) for v in found.x)
    return a / sd, b - a * mean / sd


def _bal_click_model(run_root: Path) -> dict[str, Any] | None:
    """α, β and the relative examination by position of the BAL epoch whose ranker step gave the saved ranker."""
    history = read_json(run_root / HISTORY).get("epochs", [])
    bal = [e for e in history if is_graph_epoch(e) and "relevance_scale" in e.get("train", {})]
    if not bal:
        return None
    bias = read_json(run_root / BIAS)
    if bias.get("click_model_form", "multiplicative") != "multiplicative":
        log.info("click metrics: BAL's %s click model is not σ(u)·σ(v); only the baselines are scored",
                 bias.get("click_model_form"))
        return None
    best = (shipped(run_root) or {}).get("epoch")
    chosen = next((e for e in bal if e.get("bal_epoch") == best), bal[-1])   # its step used that epoch's (α, β)
    train = chosen["train"]
    return {"alpha": float(train["relevance_scale"]), "beta": float(train["relevance_bias"]),
            "examination": {int(k): float(v) for k, v in (train.get("examination_by_position") or {1: 1.0}).items()},
            "bal_epoch": chosen.get("bal_epoch")}


class RunClickModels:
    """The click models of one finished run, fitted (where something is missing) on a sample of its training rows."""

    def __init__(self, run_root: str | Path, train: pd.DataFrame, batch_size: int = 1024):
        self.run_root = Path(run_root)
        self.batch_size = batch_size
        clicks, positions = train[CLICK].to_numpy(np.float64), train[POSITION].to_numpy()
        self.ctr = position_ctr(clicks, positions)
        bias = read_json(self.run_root / BIAS) if (self.run_root / BIAS).exists() else {}
        self.method = bias.get("method")
        self.kind, self.params = None, {}
        own = METHODS[self.method].click_model if self.method in METHODS else None   # its spec's click model
        bal = _bal_click_model(self.run_root) if own == WHOLE_PAGE else None
        propensities = bias.get("propensities")
        if bal is None and not propensities:
            return                                             # naive, LightGBM, …: no click model of their own
        scores = self.scores(train)
        if bal is not None:
            self.kind, self.params = WHOLE_PAGE, bal
            exam = by_position(bal["examination"], positions)
            bal["level"] = fit_examination_level(clicks, exam, expit(bal["alpha"] * scores + bal["beta"]))
            return
        self.kind = "position_based"
        theta = {int(k): float(v) for k, v in propensities.items()}
        exam = by_position(theta, positions)
        self.params = {"propensities": theta, "loss": bias.get("loss")}
        if bias.get("loss") == POINTWISE and bias.get("theta"):      # REM: θ_k as fitted, σ(score) = γ: calibrated
            self.params["propensities"] = {int(k): float(v) for k, v in bias["theta"].items()}
            self.params["level"] = 1.0
        elif bias.get("loss") == POINTWISE:
            self.params["level"] = fit_examination_level(clicks, exam, expit(scores))
        else:
            self.params["calibration"] = dict(zip(("a", "b"), fit_logistic_calibration(clicks, exam, scores),
                                                  strict=True))

    def scores(self, frame: pd.DataFrame) -> np.ndarray:
        """r̂ of every row by the run's saved ranker (lexical features added as the run's featurize stage did)."""
        lexical = self.run_root / LEXICAL_STATE
        if FEATURES not in frame.columns and lexical.exists():
            frame = frame.assign(**{FEATURES: list(LexicalFeaturizer.load(lexical).transform(frame))})
        return np.asarray(score_frame(load_ranker(self.run_root / RANKER_DIR), frame, self.batch_size), np.float64)

    def predict(self, frame: pd.DataFrame) -> dict[str, np.ndarray]:
        """{model name: p(click) per row of `frame`}: "ctr" always, the run's own model when it has one."""
        positions = frame[POSITION].to_numpy()
        out = {"ctr": by_position(self.ctr, positions)}
        if self.kind is None:
            return out
        scores = self.scores(frame)
        if self.kind == WHOLE_PAGE:
            exam = self.params["level"] * by_position(self.params["examination"], positions)
            out[WHOLE_PAGE] = exam * expit(self.params["alpha"] * scores + self.params["beta"])
        elif "calibration" in self.params:
            calibration = self.params["calibration"]
            out["position_based"] = by_position(self.params["propensities"], positions) * expit(
                calibration["a"] * scores + calibration["b"])
        else:
            out["position_based"] = (self.params["level"] * by_position(self.params["propensities"], positions)
                                     * expit(scores))
        return {name: _clipped(p) for name, p in out.items()}

    def describe(self) -> dict[str, Any]:
        """What each model is and the numbers fitted for it, JSON-able."""
        out: dict[str, Any] = {"ctr": {"ctr_by_position": {str(k): v for k, v in self.ctr.items()}}}
        if self.kind is not None:
            params = {k: ({str(p): v for p, v in val.items()} if k in ("examination", "propensities") else val)
                      for k, val in self.params.items()}
            out[self.kind] = {"method": self.method, **params}
        return out


def true_click_prob(run_root: str | Path, frame: pd.DataFrame) -> np.ndarray | None:
    """The simulator's click probability of every row of `frame`, or None when the run's truth lacks any row
    (not simulated, or other sessions: rows are matched on session, position and document)."""
    path = Path(run_root) / TRUTH_DIR / TRUTH_SESSIONS
    if not path.exists():
        return None
    keys = [c for c in (SESSION_ID, POSITION, DOC_ID) if c in frame.columns]
    truth = pd.read_parquet(path, columns=[*keys, TRUE_CLICK_PROB])
    if DOC_ID in keys:
        truth[DOC_ID] = truth[DOC_ID].astype(frame[DOC_ID].dtype)
    found = frame[keys].merge(truth, on=keys, how="left")[TRUE_CLICK_PROB].to_numpy(np.float64)
    return None if len(found) != len(frame) or np.isnan(found).any() else found


def click_metrics(run_root: str | Path, heldout: pd.DataFrame, train: pd.DataFrame,
                  batch_size: int = 1024) -> dict[str, Any]:
    """Log-likelihood and perplexity (overall, by position) of every click model of the run on `heldout`."""
    missing = [c for c in (SESSION_ID, POSITION, CLICK) if c not in heldout.columns]
    if missing:
        raise SchemaError(f"held-out sessions: missing column(s) {missing}; a sessions table has "
                          f"{SESSION_ID}, {POSITION}, {CLICK}")
    models = RunClickModels(run_root, train, batch_size)
    predicted = models.predict(heldout)
    truth = true_click_prob(run_root, heldout)
    if truth is not None:
        predicted["truth"] = truth
    clicks, positions = heldout[CLICK].to_numpy(np.float64), heldout[POSITION].to_numpy()
    result: dict[str, Any] = {"sessions": int(heldout[SESSION_ID].nunique()), "rows": int(len(heldout)),
                              "models": {}, "fitted": models.describe()}
    for name, p in predicted.items():
        result["models"][name] = {"log_likelihood": click_log_likelihood(clicks, p),
                                  "perplexity": click_perplexity(clicks, p, positions)}
    return result


def perplexity_table(clicks_section: dict[str, Any]) -> pd.DataFrame:
    """One row per model: log-likelihood, overall perplexity and perplexity at each position (for the CLI and
    the report)."""
    rows = []
    for name, m in clicks_section["models"].items():
        ppl = m["perplexity"]
        rows.append({"model": name, "log_likelihood": m["log_likelihood"], "perplexity": ppl["overall"],
                     **{f"@{k}": v for k, v in ppl["by_position"].items()}})
    return pd.DataFrame(rows)


def heldout_click_metrics(run: RunDir, heldout_path: Path, cfg: RunConfig) -> dict[str, Any]:
    """`click_metrics` of the run on (a sample of) the sessions at `heldout_path`, its click models fitted where they
    need it on a sample of the training sessions (the evaluate stage's and `wpultr evaluate`'s one route)."""
    training, _ = training_tables(run)
    lists = arrow_lists(cfg)    # dense features as Arrow buffers, not a numpy object per row
    train = read_sampled_sessions(training, FIT_SESSIONS, cfg.seed, training_columns(cfg, column_names(training)),
                                  lists)
    if Path(heldout_path).is_dir():
        heldout = read_sampled_sessions(Path(heldout_path), HELDOUT_SESSIONS, cfg.seed,
                                        training_columns(cfg, column_names(Path(heldout_path))), lists)
    else:
        heldout = sample_sessions(read_table(heldout_path), HELDOUT_SESSIONS, cfg.seed).reset_index(drop=True)
    return click_metrics(run.root, heldout, train, cfg.train.batch_size)
