"""Pluggable user-behaviour models: given a page, each result's examination and click probability, and clicks.

A model implements the small `UserModel` protocol. Independent-examination models (PBM, whole-page, trust
bias, individual-level observation, PRS's binary-relevance clicks) give click = examination x
click-given-examination and draw every click independently; browsing models (cascade, continuous, row
skipping) walk the page top-down and draw clicks in that order, while `probabilities` gives their exact
marginals.

Context bias factors act the same way in every model: a result the user reaches is read with the
product of its context levels' scales (page.context_scale), so examination is scaled by it.
Parameters come from `data.simulate.user_model_params`; each model's keys and defaults are documented in
settings/user_model.py (checked there, so the config can check them without importing the models).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
from sklearn.ensemble import ExtraTreesRegressor

from ..schema import FEATURES, MAX_LABEL, POSITION
from ..settings.user_model import MEDIA_TYPE_NAMES, USER_MODEL_PARAMS, Param, resolve_user_model_params
from .page import MEDIA_TYPE, SERP_MAX_SHOW_HEIGHT, Page


class UserModel(Protocol):
    """What the simulator needs of a user-behaviour model."""

    name: ClassVar[str]

    @property
    def layout_columns(self) -> int: ...                      # results per row of the page layout

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]: ...  # (examination, click)

    def sample_clicks(self, page: Page, rng: np.random.Generator) -> np.ndarray: ...  # int8 (n, k)

    def click_parents(self) -> tuple[str, ...]: ...           # page/document columns clicks depend on

    def params(self) -> dict[str, Any]: ...                   # resolved, JSON-able, drawn values included


@dataclass(frozen=True)
class ModelContext:
    """What models may need beyond their parameters: corpus statistics and a generator for drawn values."""

    n_media_types: int
    feature_mean: np.ndarray
    feature_std: np.ndarray
    rng: np.random.Generator
    features: np.ndarray | None = None     # the corpus's dense features and true grades, for models that pick
    labels: np.ndarray | None = None       # features by their importance (the individual-level model)


def click_relevance(label: np.ndarray, click_noise: float) -> np.ndarray:
    """Chance an examined result is clicked for its relevance: ε + (1 - ε)(2^y - 1)/(2^ymax - 1)."""
    return click_noise + (1.0 - click_noise) * (2.0 ** label - 1.0) / (2.0 ** MAX_LABEL - 1.0)  # LBD Eq. (3)


def position_examination(position: np.ndarray, power: float) -> np.ndarray:
    """Examination by position alone: 1 / p^power (004 Eq. (27) for power 1)."""
    return np.asarray(position, dtype=np.float64) ** -power


class _Model:
    """Shared parameter handling; subclasses define name, PARAMS and the behaviour."""

    name: ClassVar[str]
    PARAMS: ClassVar[dict[str, Param]]

    def __init__(self, params: dict[str, Any], context: ModelContext):
        self.p = dict(params)

    @property
    def layout_columns(self) -> int:
        return 1

    def params(self) -> dict[str, Any]:
        return dict(self.p)


class _IndependentClicks(_Model):
    """Clicks drawn independently per result with the model's click probability."""

    def sample_clicks(self, page: Page, rng: np.random.Generator) -> np.ndarray:
        _, click = self.probabilities(page)
        return (rng.random(click.shape) < click).astype(np.int8)


class PositionBased(_IndependentClicks):
    """PBM: examination depends on position only, click = examination x relevance (BAL §4.1 remark)."""

    name = "pbm"
    PARAMS = USER_MODEL_PARAMS["pbm"]

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]:
        exam = position_examination(page.position, self.p["position_power"]) * page.context_scale
        return exam, exam * click_relevance(page.label, self.p["click_noise"])  # p(c) = p(o) p(r)

    def click_parents(self) -> tuple[str, ...]:
        return (POSITION,) if self.p["position_power"] > 0 else ()


class PropensityRatioClicks(_IndependentClicks):
    """The click model of PRS's experiments (Wang, Wang, Wang, SIGIR 2020, §4.3 and §5.2): relevance is binary
    (grade >= relevant_from), examination (1/p)^η, and an examined result is clicked with ε+ = 1 - μ when
    relevant and ε- = μ when not, so noise is symmetric rather than graded as in `click_relevance`."""

    name = "prs"
    PARAMS = USER_MODEL_PARAMS["prs"]

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]:
        exam = position_examination(page.position, self.p["eta"]) * page.context_scale
        relevant = np.asarray(page.label) >= self.p["relevant_from"]
        return exam, exam * np.where(relevant, 1.0 - self.p["mu"], self.p["mu"])

    def click_parents(self) -> tuple[str, ...]:
        return (POSITION,) if self.p["eta"] > 0 else ()


class WholePage(_IndependentClicks):
    """Whole-page model: examination depends on position, how much of the result was on screen and its
    media type; an examined result is clicked for its relevance or, failing that, for its media type's looks.

    examination = 1/p^κ · (1 - w + w · min(1, shown / readable)) · attention[m]
    click       = examination · (r + (1 - r) · attractiveness[m])
    """

    name = "whole_page"
    PARAMS = USER_MODEL_PARAMS["whole_page"]

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]:
        p = self.p
        shown = np.minimum(1.0, page.serp_max_show_height / p["readable_height"])
        exam = (position_examination(page.position, p["position_power"])
                * (1.0 - p["visibility_weight"] + p["visibility_weight"] * shown)
                * np.asarray(p["media_attention"])[page.media_type] * page.context_scale)
        relevance = click_relevance(page.label, p["click_noise"])
        attractive = np.asarray(p["media_attractiveness"])[page.media_type]
        return exam, exam * (relevance + (1.0 - relevance) * attractive)

    def click_parents(self) -> tuple[str, ...]:
        p = self.p
        parents = []
        if p["position_power"] > 0:
            parents.append(POSITION)
        if len(set(p["media_attention"])) > 1 or len(set(p["media_attractiveness"])) > 1:
            parents.append(MEDIA_TYPE)
        if p["visibility_weight"] > 0:
            parents.append(SERP_MAX_SHOW_HEIGHT)
        return tuple(parents)


class TrustBias(_IndependentClicks):
    """Trust bias (Agarwal et al. 2019): examined relevant results are clicked with ε+, examined
    non-relevant ones with ε-_p = epsilon_negative / p, which falls with position."""

    name = "trust"
    PARAMS = USER_MODEL_PARAMS["trust"]

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]:
        p = self.p
        exam = position_examination(page.position, p["position_power"]) * page.context_scale
        relevant = click_relevance(page.label, 0.0)
        trust = p["epsilon_positive"] * relevant + p["epsilon_negative"] / page.position * (1.0 - relevant)
        return exam, exam * trust

    def click_parents(self) -> tuple[str, ...]:
        return (POSITION,) if self.p["position_power"] > 0 or self.p["epsilon_negative"] > 0 else ()


class Cascade(_Model):
    """Cascade with continuation (DCM-style): the user reads top-down, clicks a read result with its
    relevance probability, then goes on with `continue_after_click` after a click and
    `continue_after_skip` otherwise. (0, 1) is the classic cascade model."""

    name = "cascade"
    PARAMS = USER_MODEL_PARAMS["cascade"]

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]:
        relevance = click_relevance(page.label, self.p["click_noise"])
        read_click = page.context_scale * relevance
        go_on = read_click * self.p["continue_after_click"] + (1.0 - read_click) * self.p["continue_after_skip"]
        reach = np.cumprod(np.concatenate((np.ones((go_on.shape[0], 1)), go_on[:, :-1]), axis=1), axis=1)
        exam = reach * page.context_scale
        return exam, exam * relevance

    def sample_clicks(self, page: Page, rng: np.random.Generator) -> np.ndarray:
        relevance = click_relevance(page.label, self.p["click_noise"])
        n, k = relevance.shape
        clicks = np.zeros((n, k), dtype=np.int8)
        reached = np.ones(n, dtype=bool)
        for i in range(k):
            click = reached & (rng.random(n) < page.context_scale[:, i]) & (rng.random(n) < relevance[:, i])
            clicks[:, i] = click
            go_on = np.where(click, self.p["continue_after_click"], self.p["continue_after_skip"])
            reached &= rng.random(n) < go_on
        return clicks

    def click_parents(self) -> tuple[str, ...]:
        stops = min(self.p["continue_after_click"], self.p["continue_after_skip"]) < 1.0
        return (POSITION,) if stops else ()


class ContinuousBrowsing(PositionBased):
    """Continuous examination without skipping (004 §4, §6.1): the user reads positions 1..d, where the
    last read position d has P(d >= i) = 1 / i^κ, and clicks each read result with its relevance.
    Its marginals are PBM's (P(read i) = 1 / i^κ), so `probabilities` and `click_parents` are inherited;
    only the draw differs: one walk down the page per session, not independent clicks."""

    name = "continuous"
    PARAMS = USER_MODEL_PARAMS["continuous"]

    def sample_clicks(self, page: Page, rng: np.random.Generator) -> np.ndarray:
        n, k = page.shape
        power = self.p["position_power"]
        u = 1.0 - rng.random(n)                                   # in (0, 1]
        with np.errstate(over="ignore"):                          # a huge depth is cut to k anyway
            last = np.minimum(k, np.floor(u ** (-1.0 / power))) if power > 0 else np.full(n, k)
        reached = page.position <= last[:, None]                  # P(d >= i) = P(u <= i^-κ) = i^-κ
        read = reached & (rng.random((n, k)) < page.context_scale)
        relevance = click_relevance(page.label, self.p["click_noise"])
        return (read & (rng.random((n, k)) < relevance)).astype(np.int8)


def row_skipping_reach(k: int, columns: int, skip_row: float, continue_prob: float) -> np.ndarray:
    """θ(u) of 004 Eq. (22) for ranks 1..k on a grid of `columns` (C_v = C for every rank), indexed from 0.

    Before each row the user skips it with probability γ = `skip_row`, else reads on with C = `continue_prob`.
    Also the row-skipping examination model of the pairwise framework (`methods.propensities.joint_examination`).
    """
    rank = np.arange(k)
    row, col = rank // columns, rank % columns
    row_sizes = np.bincount(row)
    passed = (1.0 - skip_row) * continue_prob ** row_sizes + skip_row      # the user gets past row m
    before = np.concatenate(([1.0], np.cumprod(passed)[:-1]))
    return before[row] * (1.0 - skip_row) * continue_prob ** col


class RowSkipping(_Model):
    """Row skipping on a grid (Xie et al. 2019, 004 Eq. (22)): before each row the user skips it with
    probability γ, else reads its results left to right and stops after each with probability 1 - C."""

    name = "row_skipping"
    PARAMS = USER_MODEL_PARAMS["row_skipping"]

    @property
    def layout_columns(self) -> int:
        return self.p["columns"]

    def reach_probability(self, k: int) -> np.ndarray:
        """θ(u) for ranks 1..k with C_v = C for every rank (004 Eq. (22))."""
        return row_skipping_reach(k, self.p["columns"], self.p["skip_row"], self.p["continue_prob"])

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]:
        exam = self.reach_probability(page.shape[1])[None, :] * page.context_scale
        return exam, exam * click_relevance(page.label, self.p["click_noise"])

    def sample_clicks(self, page: Page, rng: np.random.Generator) -> np.ndarray:
        n, k = page.shape
        cols = self.p["columns"]
        relevance = click_relevance(page.label, self.p["click_noise"])
        clicks = np.zeros((n, k), dtype=np.int8)
        browsing = np.ones(n, dtype=bool)
        for start in range(0, k, cols):
            in_row = browsing & (rng.random(n) >= self.p["skip_row"])
            for i in range(start, min(start + cols, k)):
                read = in_row & (rng.random(n) < page.context_scale[:, i])
                clicks[:, i] = read & (rng.random(n) < relevance[:, i])
                stop = in_row & (rng.random(n) >= self.p["continue_prob"])
                in_row &= ~stop
                browsing &= ~stop
        return clicks

    def click_parents(self) -> tuple[str, ...]:
        return (POSITION,) if self.p["continue_prob"] < 1.0 else ()


# v_p by position from eye tracking (Joachims et al. 2005), as LBD §6.1 and ULTRA's click models use them.
EYE_TRACKING_EXAMINATION = (0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06)


def crux_features(features: np.ndarray, labels: np.ndarray, n_crux: int) -> np.ndarray:
    """Indices of the n_crux features most important for the labels by extremely randomised trees fitted on
    the standardised features of the whole corpus (LBD §6.1, after Tian et al. 2020); fixed random state."""
    std = features.std(axis=0)
    x = (features - features.mean(axis=0)) / np.where(std > 0, std, 1.0)
    trees = ExtraTreesRegressor(n_estimators=20, max_depth=8, min_samples_leaf=20, random_state=0, n_jobs=1)
    trees.fit(x, labels.astype(np.float64))
    return np.sort(np.argsort(-trees.feature_importances_, kind="stable")[:n_crux])


class IndividualObservation(_IndependentClicks):
    """Individual-level observation (LBD §6.1): o = v_p ^ max(w·x' + 1, 0), with v_p the eye-tracking
    examination of position p (raised to κ), x' the standardised crux features — the n_crux features most
    important for relevance (extra trees on the corpus; the first n_crux without the corpus) — and w uniform
    in [-η, η]; η is the coupling level of relevance and observation."""

    name = "lbd"
    PARAMS = USER_MODEL_PARAMS["lbd"]

    def __init__(self, params: dict[str, Any], context: ModelContext):
        super().__init__(params, context)
        n_crux = self.p["n_crux"]
        if context.features is not None and context.labels is not None:
            self.crux = crux_features(context.features, context.labels, n_crux)
        else:
            self.crux = np.arange(n_crux)
        self.crux_mean = context.feature_mean[self.crux]
        self.crux_std = context.feature_std[self.crux]
        self.p["crux_features"] = self.crux.tolist()
        self.p["crux_weights"] = context.rng.uniform(-self.p["eta"], self.p["eta"], size=n_crux).tolist()

    def position_examination(self, position: np.ndarray) -> np.ndarray:
        """v_p: eye-tracking examination of position p (the last value past position 10), raised to κ."""
        table = np.asarray(EYE_TRACKING_EXAMINATION)
        return table[np.minimum(np.asarray(position), len(table)) - 1] ** self.p["position_power"]

    def probabilities(self, page: Page) -> tuple[np.ndarray, np.ndarray]:
        crux = (page.features[:, :, self.crux] - self.crux_mean) / self.crux_std                # f_set(x')
        exponent = np.maximum(crux @ np.asarray(self.p["crux_weights"]) + 1.0, 0.0)
        exam = self.position_examination(page.position) ** exponent                            # LBD §6.1
        exam = exam * page.context_scale
        return exam, exam * click_relevance(page.label, self.p["click_noise"])

    def click_parents(self) -> tuple[str, ...]:
        if self.p["position_power"] == 0:
            return ()
        return (POSITION, FEATURES) if self.p["eta"] > 0 else (POSITION,)


USER_MODELS: dict[str, type[_Model]] = {cls.name: cls for cls in (
    WholePage, PositionBased, TrustBias, Cascade, ContinuousBrowsing, RowSkipping, IndividualObservation,
    PropensityRatioClicks)}


def make_user_model_spec(name: str, params: dict[str, Any], n_media_types: int = len(MEDIA_TYPE_NAMES),
                         n_features: int | None = None) -> tuple[type[_Model], dict[str, Any]]:
    """(model class, its parameters with defaults filled in); ConfigError naming the key when one is wrong."""
    return USER_MODELS[name], resolve_user_model_params(name, params, n_media_types, n_features)


def make_user_model(name: str, params: dict[str, Any], context: ModelContext, n_features: int) -> UserModel:
    """The configured user model, ready to score pages."""
    cls, resolved = make_user_model_spec(name, params, context.n_media_types, n_features)
    return cls(resolved, context)
