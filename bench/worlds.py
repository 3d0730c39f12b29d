"""The simulated worlds the benchmarks measure on, one place for both `bench/bal.py` and `bench/discovery.py`.

Each is a set of `data.simulate` settings over the simulator's defaults (a `user_model_params` entry
overrides only the parameters it names). None is built to match BAL's click model:

* ``default``: the simulator's defaults (whole-page user model with attractiveness and visibility on; a
  logging ranker by noisy relevance that slightly promotes videos; every document always shown as its
  own media type, and the ranker sees no media type).
* ``production``: what a production results page looks like: the logging ranker promotes videos (+1)
  and ads (+1.5); presentation varies by impression (a URL is shown as its own type half of the time, as
  a video card in one session and plain text in the next); the ranker's features include the document's
  own media type, so they correlate with the presented type; examination by position, on-screen height
  and media type (videos get about twice the attention of plain results), attractiveness on, all with the
  whole-page model's defaults but the attention vector.
* ``position_only``: PBM (examination 1/p), a logging ranker by noisy relevance, no media effects: the
  world where position-based methods should do well and BAL must not do worse.
* ``cascade`` and ``trust``: transfer checks, click models BAL's σ(u)·σ(v) cannot express. Cascade with
  continuation (DCM-style: a user reads top-down and stops after a click with chance 0.5, after a skip
  with chance 0.1, so a result's examination depends on the clicks above it); trust bias (Agarwal et al.
  2019: examined non-relevant results are clicked with a chance that falls with position, 0.65 / p).
  Presentation varies by impression as in ``production`` (a URL shown as its own media type half the time),
  and neither has a media effect on clicks. BAL must not do worse than the better Naive on either.

`MEDIA_WORLDS` (issue 30, bench/discovery.py --part null): for each user model (PBM, cascade, trust bias) and
each way the presented media type can track relevance without users caring — ``relevance``: relevant documents
are more often images and videos (`media_label_tilt`), ``logger``: the logging ranker promotes videos (+1) and
ads (+1.5), as in ``production``, ``both`` — a world with no media effect (``1x``) and the same world where a
result shown as a video is examined 1.5× and 2× as often as any other (`media_click_scale`). Presentation varies
by impression (a URL shown as its own media type half the time). ``letor-…``: the same on the LETOR sample's
real feature vectors and labels (`data.simulate.corpus: letor`, the queries with at least 12 documents).

`LETOR_WORLDS` (issue 30, bench/bal.py): the LETOR sample's real features as the corpus, presentation varying by
impression, the logger promoting videos and ads and relevant documents more often shown as them (``both``), under
PBM and cascade users: ``letor-<model>-2x`` where a result shown as a video is examined twice as often, its null
twin ``letor-<model>-1x`` (the same world, no media effect), and ``letor-position_only`` (PBM, no media anywhere).
Every annotated query of the corpus validates; bench/bal.py tests on the LETOR queries no click touched.
"""
from __future__ import annotations

from typing import Any

WORLDS: dict[str, dict[str, Any]] = {
    "default": {},
    "production": {
        "media_type_features": True, "media_type_consistency": 0.5,
        "logging_noise": 1.0, "logging_media_boost": [0.0, 0.0, 1.0, 1.5],
        "user_model": "whole_page", "user_model_params": {"media_attention": [0.5, 0.7, 1.0, 0.8]},
    },
    "position_only": {"user_model": "pbm", "logging_media_boost": [0.0, 0.0, 0.0, 0.0]},
    "cascade": {"user_model": "cascade", "media_type_consistency": 0.5},
    "trust": {"user_model": "trust", "media_type_consistency": 0.5},
}

LETOR_SAMPLE = "/work/shared/data/letor-sample/rank.train"
LETOR_HELD_OUT = "/work/shared/data/letor-sample/rank.test"     # never in a corpus: bench/bal.py tests on it
MEDIA_TILT = [0.0, 1.0, 2.0, 0.0]          # p(type | grade y) ∝ p(type) · exp(tilt · y / 4): images, videos
MEDIA_PROMOTION = [0.0, 0.0, 1.0, 1.5]     # the logging ranker's boost (the production world's)
MEDIA_EFFECTS = (1.0, 1.5, 2.0)            # how much more often a result shown as a video is examined
VIDEO = 2


def media_world(user_model: str, way: str, effect: float, corpus: str = "synthetic") -> dict[str, Any]:
    """One of `MEDIA_WORLDS`: `way` in relevance | logger | both (any other: neither), `effect` the video's
    examination ratio."""
    scale = [1.0 if m == VIDEO else 1.0 / effect for m in range(4)]
    world: dict[str, Any] = {
        "user_model": user_model, "media_type_consistency": 0.5,
        "media_label_tilt": MEDIA_TILT if way in ("relevance", "both") else [0.0] * 4,
        "logging_media_boost": MEDIA_PROMOTION if way in ("logger", "both") else [0.0] * 4,
        "media_click_scale": scale,
    }
    if corpus == "letor":
        world.update({"corpus": "letor", "letor_path": LETOR_SAMPLE, "n_queries": 161, "docs_per_query": 12,
                      "n_dense_features": 300, "n_annotated_queries": 50})
    return world


MEDIA_WORLDS: dict[str, dict[str, Any]] = {
    **{f"{model}-{way}-{effect:g}x": media_world(model, way, effect)
       for model in ("pbm", "cascade", "trust") for way in ("relevance", "logger", "both") for effect in MEDIA_EFFECTS},
    **{f"letor-{model}-both-{effect:g}x": media_world(model, "both", effect, "letor")
       for model in ("cascade", "trust") for effect in MEDIA_EFFECTS},
}


LETOR_EVALUATION = {"n_annotated_queries": 161}     # every corpus query annotated: validation draws from all


def letor_world(user_model: str, way: str, effect: float) -> dict[str, Any]:
    """One of `LETOR_WORLDS`: `media_world` on the LETOR corpus, every corpus query annotated."""
    return {**media_world(user_model, way, effect, "letor"), **LETOR_EVALUATION}


LETOR_WORLDS: dict[str, dict[str, Any]] = {
    **{f"letor-{model}-{effect:g}x": letor_world(model, "both", effect)
       for model in ("pbm", "cascade") for effect in (2.0, 1.0)},
    "letor-position_only": letor_world("pbm", "neither", 1.0),
}
