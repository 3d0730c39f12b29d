"""The user models' parameters: names, defaults, accepted values and meaning, and their check.

Below both the simulator config (settings/simulate.py validates `data.simulate.user_model_params` with it) and the
models themselves (user_models.py takes each model's PARAMS from here), so neither imports the other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..schema import MAX_LABEL

KEY_PREFIX = "data.simulate"
PARAMS_KEY = f"{KEY_PREFIX}.user_model_params"
# Names of the default media types, indexed by the media_type code written to the logs.
MEDIA_TYPE_NAMES: tuple[str, ...] = ("plain", "image", "video", "ad")


@dataclass(frozen=True)
class Param:
    """A user-model parameter: its default, the values it accepts and what it means."""

    default: Any
    kind: str      # probability | noise_level | non_negative | positive | count | grade | media_probabilities
    doc: str


# Every user model's parameters, by the model's name (user_models.USER_MODELS has the same keys).
USER_MODEL_PARAMS: dict[str, dict[str, Param]] = {
    "whole_page": {
        "position_power": Param(1.0, "non_negative", "κ: position examination 1 / p^κ"),
        "click_noise": Param(0.1, "probability", "click chance of an examined grade-0 result (ε)"),
        "visibility_weight": Param(0.5, "probability", "w: share of examination that needs the result on screen"),
        "readable_height": Param(100.0, "positive", "px of a result on screen at which it is fully readable"),
        "media_attention": Param([0.8, 0.9, 1.0, 0.7], "media_probabilities",
                                 "examination factor of each media type (plain, image, video, ad)"),
        "media_attractiveness": Param([0.0, 0.05, 0.15, 0.1], "media_probabilities",
                                      "chance an examined non-relevant result is clicked for its media type"),
    },
    "pbm": {
        "position_power": Param(1.0, "non_negative", "examination at position p is 1 / p^position_power"),
        "click_noise": Param(0.1, "probability", "click chance of an examined grade-0 result (ε)"),
    },
    "trust": {
        "position_power": Param(1.0, "non_negative", "κ: position examination 1 / p^κ"),
        "epsilon_positive": Param(1.0, "probability", "ε+: click chance of an examined relevant result"),
        "epsilon_negative": Param(0.65, "probability", "ε-_1: click chance of an examined non-relevant result "
                                                       "at position 1; ε-_p = ε-_1 / p"),
    },
    "cascade": {
        "click_noise": Param(0.1, "probability", "click chance of an examined grade-0 result (ε)"),
        "continue_after_click": Param(0.5, "probability", "chance to go on to the next result after a click"),
        "continue_after_skip": Param(0.9, "probability", "chance to go on to the next result without a click"),
    },
    "continuous": {
        "position_power": Param(1.0, "non_negative", "κ: P(user reads down to position i) = 1 / i^κ"),
        "click_noise": Param(0.1, "probability", "click chance of an examined grade-0 result (ε)"),
    },
    "row_skipping": {
        "columns": Param(2, "count", "results per row of the grid layout"),
        "skip_row": Param(0.2, "probability", "γ: chance to skip a row"),
        "continue_prob": Param(0.9, "probability", "C: chance to go on after reading a result"),
        "click_noise": Param(0.1, "probability", "click chance of an examined grade-0 result (ε)"),
    },
    "lbd": {
        "position_power": Param(1.0, "non_negative", "κ: position examination v_p = (eye-tracking v_p)^κ "
                                                     "(LBD §6.1, ULTRA's PBM: 0.68, 0.61, ..., 0.06 for κ = 1)"),
        "eta": Param(0.1, "non_negative", "η: coupling level, crux weights are drawn uniform in [-η, η]"),
        "n_crux": Param(10, "count", "how many dense features observation depends on: the most important ones "
                                      "for the labels by extra trees (LBD §6.1); the default is cut to "
                                      "n_dense_features"),
        "click_noise": Param(0.1, "probability", "click chance of an examined grade-0 result (ε)"),
    },
    "prs": {
        "eta": Param(1.0, "non_negative", "η: examination at position p is (1 / p)^η (PRS §5.2)"),
        "mu": Param(0.1, "noise_level", "μ: click noise; an examined relevant result is clicked with "
                                        "ε+ = 1 - μ, an examined non-relevant one with ε- = μ (PRS §4.3, §5.2)"),
        "relevant_from": Param(3, "grade", "binary relevance: grades >= this are relevant (PRS §5.2: "
                                           "3 or 4 of 0-4 on Yahoo and WEB10K)"),
    },
}


def config_error(key: str, message: str) -> ConfigError:
    return ConfigError(f"{key}: {message}")


def check_value(key: str, value: Any, param: Param, n_media_types: int) -> Any:
    """The value converted to the parameter's type; ConfigError naming `key` when it does not fit."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if param.kind == "count":
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise config_error(key, f"must be an integer >= 1, got {value!r}")
        return value
    if param.kind == "grade":
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LABEL):
            raise config_error(key, f"must be an integer grade in [1, {MAX_LABEL}], got {value!r}")
        return value
    if param.kind == "media_probabilities":
        ok = isinstance(value, (list, tuple)) and len(value) == n_media_types and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in value)
        if not ok:
            raise config_error(key, f"must be a list of {n_media_types} numbers in [0, 1] (one per media type), "
                                     f"got {value!r}")
        return [float(v) for v in value]
    checks = {"probability": (lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]"),
              "noise_level": (lambda v: 0.0 <= v < 0.5, "a number in [0, 0.5) (clicks must favour relevance)"),
              "non_negative": (lambda v: 0.0 <= v < float("inf"), "a finite number >= 0"),
              "positive": (lambda v: 0.0 < v < float("inf"), "a finite number > 0")}
    accepts, wanted = checks[param.kind]
    if not (number and accepts(value)):
        raise config_error(key, f"must be {wanted}, got {value!r}")
    return float(value)


def resolve_user_model_params(name: str, params: dict[str, Any], n_media_types: int = len(MEDIA_TYPE_NAMES),
                              n_features: int | None = None) -> dict[str, Any]:
    """The parameters of user model `name` with defaults filled in; ConfigError naming the key when one is wrong."""
    if name not in USER_MODEL_PARAMS:
        raise config_error(f"{KEY_PREFIX}.user_model", f"{name!r} is not a user model; allowed values: "
                                                        f"{', '.join(map(repr, USER_MODEL_PARAMS))}")
    table = USER_MODEL_PARAMS[name]
    unknown = sorted(set(params) - set(table))
    if unknown:
        raise config_error(f"{PARAMS_KEY}.{unknown[0]}", f"not a parameter of user model {name!r}; "
                                                           f"allowed keys: {', '.join(table)}")
    resolved = {}
    for key, param in table.items():
        default = param.default
        if param.kind == "media_probabilities" and key not in params and len(default) != n_media_types:
            raise config_error(f"{PARAMS_KEY}.{key}", f"the default has {len(default)} media types but "
                                                       f"media_type_probs has {n_media_types}; set it")
        resolved[key] = check_value(f"{PARAMS_KEY}.{key}", params.get(key, default), param, n_media_types)
    if n_features is not None and "n_crux" in resolved and "n_crux" not in params:
        resolved["n_crux"] = min(resolved["n_crux"], n_features)      # the default adapts to fewer features
    if n_features is not None and resolved.get("n_crux", 0) > n_features:
        raise config_error(f"{PARAMS_KEY}.n_crux", f"must be <= n_dense_features ({n_features}), "
                                                    f"got {resolved['n_crux']}")
    return resolved
