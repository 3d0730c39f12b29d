"""Settings of the whole-page click simulator, validated as part of the run config.

A SimulateConfig checks itself when built (`validate_simulate_config`: ranges, list lengths, the user
model and its parameters, what the config loader's type check cannot) and raises ConfigError naming
the `data.simulate.*` key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..errors import ConfigError
from ..schema import BAIDU_MAX_POSITION
from .user_model import KEY_PREFIX, MEDIA_TYPE_NAMES, resolve_user_model_params  # noqa: F401

MIN_VOCAB_SIZE = 100          # below this, distinct documents start to share their whole text
MIN_QUERIES = 10              # one query per frequency bucket at least
CORPORA = ("synthetic", "letor", "onehot")   # where queries, documents, features and labels come from
LOGGING_RANKERS = ("grade", "linear")         # what the logging ranker's score is made of (simulate.logging_policy)


@dataclass
class SimulateConfig:
    """Whole-page click simulator settings (see wpultr.simulate)."""

    KEY: ClassVar[str] = KEY_PREFIX        # dotted key of this section in a run config (names its errors)
    corpus: Literal[CORPORA] = "synthetic"   # letor: real queries, features, labels (letor_corpus); onehot: the
    #                                       Identifiability paper's designed one-hot documents (onehot_corpus)
    n_documents: int = 10_000             # corpus onehot: documents, n_documents / docs_per_query per position
    letor_path: str | list[str] | None = None   # LETOR/SVMlight file(s) for corpus letor; queries from <path>.query
    n_queries: int = 200
    docs_per_query: int = 20
    n_sessions: int = 4000
    n_annotated_queries: int = 100
    results_per_page: int = 10
    vocab_size: int = 2000
    n_dense_features: int = 16
    media_type_features: bool = False      # append a one-hot of the media type to the dense features
    zipf_exponent: float = 1.1            # query popularity ∝ 1 / rank^zipf_exponent
    logging_noise: float = 1.0            # std of the noise the logging ranker adds to its score, per session
    # what the logging ranker scores: "grade" (the true grade) or "linear" (a linear pairwise ranker on the dense
    # features, fitted on the grades of logging_ranker_queries random queries: 004's Ranking SVM on 1 % of the data)
    logging_ranker: Literal[LOGGING_RANKERS] = "grade"
    logging_ranker_queries: int = 20      # logging_ranker linear: the queries whose grades train it
    user_model: str = "whole_page"        # pbm, whole_page, trust, cascade, continuous, row_skipping, lbd, prs
    user_model_params: dict[str, Any] = field(default_factory=dict)
    n_context_factors: int = 0            # extra categorical columns context_0.. that scale examination
    context_levels: int = 5               # levels of each context factor
    context_strength: float = 0.5         # each level scales examination by a factor drawn from U[1 - s, 1]
    # Page presentation: one entry per media type (0 plain, 1 image, 2 video, 3 ad).
    media_type_probs: list[float] = field(default_factory=lambda: [0.6, 0.2, 0.12, 0.08])
    media_type_consistency: float = 1.0   # chance an impression shows its document's own media type; else
    #                                       one drawn from media_type_probs (presentation varies by impression)
    media_heights: list[float] = field(default_factory=lambda: [130.0, 260.0, 330.0, 160.0])  # mean px
    height_spread: float = 0.25           # sigma of the log-normal factor around a type's mean height
    logging_media_boost: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.5, 0.0])
    # a document's own media type by its grade y: p(m | y) ∝ media_type_probs[m] · exp(media_label_tilt[m] · y / 4)
    # (> 0: relevant documents are more often of type m); all 0: independent of the grade
    media_label_tilt: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    # each presented media type scales examination in every user model (a media effect on clicks; <= 1)
    media_click_scale: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0, 1.0])
    screen_height: float = 700.0          # viewport height in px
    scroll_screens: float = 1.0           # mean scroll depth of a session, in screens (exponential)
    position_blocks: int = 1              # K > 1: each document is shown only within one of K blocks of
    #                                       positions (a disconnected identifiability graph; logging_policy)

    def __post_init__(self) -> None:
        validate_simulate_config(self)


def _error(key: str, message: str) -> ConfigError:
    return ConfigError(f"{KEY_PREFIX}.{key}: {message}")


def validate_simulate_config(cfg: SimulateConfig) -> None:
    """Raise ConfigError naming the first `data.simulate.*` key whose value the simulator cannot use.

    Run when a SimulateConfig is built and again by `simulate` (a config may be changed after it was built).
    """
    at_least = {"n_queries": MIN_QUERIES, "docs_per_query": 1, "n_sessions": 1, "n_annotated_queries": 1,
                "results_per_page": 1, "vocab_size": MIN_VOCAB_SIZE, "n_dense_features": 1,
                "n_context_factors": 0, "context_levels": 2, "n_documents": 1, "logging_ranker_queries": 1}
    for key, low in at_least.items():
        if getattr(cfg, key) < low:
            raise _error(key, f"must be >= {low}, got {getattr(cfg, key)}")
    if cfg.results_per_page > min(cfg.docs_per_query, BAIDU_MAX_POSITION):
        raise _error("results_per_page", f"must be <= docs_per_query ({cfg.docs_per_query}) and <= "
                                         f"{BAIDU_MAX_POSITION}, got {cfg.results_per_page}")
    if not 1 <= cfg.position_blocks <= cfg.results_per_page:
        raise _error("position_blocks", f"must be in [1, results_per_page ({cfg.results_per_page})], "
                                        f"got {cfg.position_blocks}")
    if cfg.logging_ranker not in LOGGING_RANKERS:
        raise _error("logging_ranker", f"{cfg.logging_ranker!r} is not allowed; allowed values: "
                                       f"{', '.join(map(repr, LOGGING_RANKERS))}")
    if cfg.logging_ranker == "linear" and cfg.logging_ranker_queries > cfg.n_queries:
        raise _error("logging_ranker_queries", f"must be <= n_queries ({cfg.n_queries}), "
                                               f"got {cfg.logging_ranker_queries}")
    if cfg.n_annotated_queries > cfg.n_queries:
        raise _error("n_annotated_queries", f"must be <= n_queries ({cfg.n_queries}), got {cfg.n_annotated_queries}")
    for key in ("zipf_exponent", "logging_noise", "height_spread", "scroll_screens"):
        value = getattr(cfg, key)
        if not (math.isfinite(value) and value >= 0):
            raise _error(key, f"must be a finite number >= 0, got {value}")
    if not 0.0 <= cfg.media_type_consistency <= 1.0:
        raise _error("media_type_consistency", f"must be in [0, 1], got {cfg.media_type_consistency}")
    if not 0.0 <= cfg.context_strength < 1.0:
        raise _error("context_strength", f"must be in [0, 1), got {cfg.context_strength}")
    if not cfg.screen_height > 0:
        raise _error("screen_height", f"must be > 0, got {cfg.screen_height}")
    probs = cfg.media_type_probs
    if len(probs) < 1 or any(p < 0 for p in probs) or abs(sum(probs) - 1.0) > 1e-6:
        raise _error("media_type_probs", f"must be non-negative and sum to 1, got {probs}")
    for key in ("media_heights", "logging_media_boost", "media_label_tilt", "media_click_scale"):
        if len(getattr(cfg, key)) != len(probs):
            raise _error(key, f"needs one value per media type ({len(probs)}, as media_type_probs), "
                              f"got {len(getattr(cfg, key))}")
    if any(not (math.isfinite(t) and abs(t) <= 20) for t in cfg.media_label_tilt):
        raise _error("media_label_tilt", f"must be finite numbers in [-20, 20], got {cfg.media_label_tilt}")
    if any(not 0.0 < m <= 1.0 for m in cfg.media_click_scale):
        raise _error("media_click_scale",
                     f"must all be in (0, 1] (they scale examination), got {cfg.media_click_scale}")
    if any(h <= 0 for h in cfg.media_heights):
        raise _error("media_heights", f"must all be > 0, got {cfg.media_heights}")
    resolve_user_model_params(cfg.user_model, cfg.user_model_params, n_media_types=len(probs))
    _validate_corpus(cfg)


def _validate_corpus(cfg: SimulateConfig) -> None:
    """corpus is known; letor_path is given exactly when corpus is letor (file contents: letor_corpus)."""
    if cfg.corpus not in CORPORA:
        raise _error("corpus", f"{cfg.corpus!r} is not allowed; allowed values: {', '.join(map(repr, CORPORA))}")
    paths = [cfg.letor_path] if isinstance(cfg.letor_path, str) else cfg.letor_path
    if paths is not None and (not paths or not all(isinstance(p, str) and p.strip() for p in paths)):
        raise _error("letor_path", f"must be null, a file path or a non-empty list of file paths, "
                                   f"got {cfg.letor_path!r}")
    if cfg.corpus == "onehot":
        _validate_onehot(cfg)
    if cfg.corpus == "letor" and paths is None:
        raise _error("letor_path", "must name the LETOR file(s) for corpus 'letor', got None")
    if cfg.corpus != "letor" and paths is not None:
        raise _error("letor_path", f"must be null unless corpus is 'letor' (corpus is {cfg.corpus!r}), "
                                   f"got {cfg.letor_path!r}")


def _validate_onehot(cfg: SimulateConfig) -> None:
    """The designed corpus shows every candidate, and each position's pool fills its slots (onehot_corpus)."""
    if cfg.results_per_page != cfg.docs_per_query:
        raise _error("results_per_page", f"must equal docs_per_query ({cfg.docs_per_query}) for corpus 'onehot' "
                                         f"(every document of a query is shown), got {cfg.results_per_page}")
    high = cfg.n_queries * cfg.docs_per_query
    if not (isinstance(cfg.n_documents, int) and cfg.docs_per_query <= cfg.n_documents <= high):
        raise _error("n_documents", f"must be an integer in [docs_per_query ({cfg.docs_per_query}), n_queries x "
                                    f"docs_per_query ({high})] for corpus 'onehot', got {cfg.n_documents!r}")
