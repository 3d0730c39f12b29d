"""Influence estimators: conditional densities p(x_i | parents) of page features (BAL §3.1, Eq. 6–7).

For a page (SEPP) feature x_i with parents π_i in the discovered graph, BAL fits one MLP per feature
on the masked input Z_{π_i}: Z = [c, r̂, x_1, …, x_n] with every column that is not a parent of x_i
masked out (Eq. 6). Masking a column to zero and dropping it are the same function of the data (its
first-layer weights never see a non-zero input), so the network here takes the parent columns only.
The output H_i holds the parameters of x_i's distribution, and every network is trained by maximum
likelihood (Eq. 7):

* continuous and ordinal (Bradley–Terry scored) features: a Gaussian head, H = (mean, log-std), with
  std = min_std + exp(log-std) so that a parent that nearly determines x cannot drive the density
  to infinity;
* categorical features (codes 0 = unknown, 1..K): a categorical head, H = logits over the codes
  (BAL's "polynomial", i.e. multinomial, distribution).

Inputs: numeric parents (r̂, c, Bradley–Terry scores, standardised values) are standardised with the
fitted rows' mean and standard deviation; categorical parents enter one-hot. A Gaussian target is
standardised too, and log_prob adds the Jacobian −log(scale) so densities are in the feature's own
units. With no parents at all the density is unconditional, p(x); it is then fitted in closed form,
always: the Gaussian MLE (mean, std with ddof 0, std floored at min_std) and, for a categorical
feature, code frequencies with a Krichevsky–Trofimov pseudo count of ½ per code (so a code absent
from the fit keeps a finite log probability, as the network's softmax does).

Training: Adam on mini-batches, a validation split drawn by the seed, early stopping on the
validation negative log-likelihood with the best epoch's parameters restored.

`fit_influence_estimators` fits, for every confounded feature of a BiasReport, the denominator
p(x | r̂, m) of its importance weight and (per `InfluenceConfig.numerator`) the numerator model that
`weights.py` needs. State is saved without pickle: JSON plus safetensors.
"""
from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors.numpy import load_file, save_file
from torch import nn

from ..causal.biases import BiasReport
from ..schema import CLICK, RELEVANCE_SCORE, FeatureKind
from ..settings.bal_weighting import InfluenceConfig

DENSITY_FORMAT = "wpultr.conditional_density/1"
INFLUENCE_FORMAT = "wpultr.influence_estimators/1"
DENSITY_JSON, DENSITY_TENSORS = "density.json", "density.safetensors"
INFLUENCE_JSON, INFLUENCE_TENSORS = "influence.json", "influence.safetensors"
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_PREDICT_CHUNK = 65_536
DISTINCT_MIN_ROWS = 4096         # below: one network pass is cheap anyway
DISTINCT_SHARE = 0.25            # `distinct_inputs` pays its sort when distinct values are at most this share
_MAX_LOG_STD = 10.0   # a standardised std above e^10 only means the network is far off; it keeps exp finite


# ---------------------------------------------------------------------------------------------
# Pure maths: the two heads' log-likelihoods (Eq. 7) and the closed-form unconditional fits
# ---------------------------------------------------------------------------------------------
def gaussian_log_prob(y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(y; mean, std²), elementwise."""
    z = (y - mean) / std
    return -0.5 * z * z - torch.log(std) - _HALF_LOG_2PI


def categorical_log_prob(codes: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """log p(code) from a (rows, K) table of log probabilities."""
    return log_probs.gather(1, codes.long().unsqueeze(1)).squeeze(1)


def gaussian_mle(y: np.ndarray, min_std: float) -> tuple[float, float]:
    """Maximum-likelihood mean and std (ddof 0), the std floored at min_std."""
    return float(y.mean()), max(float(y.std()), min_std)


def categorical_frequencies(codes: np.ndarray, n_categories: int, pseudo_count: float = 0.5) -> np.ndarray:
    """Log code frequencies with a pseudo count per code (Krichevsky–Trofimov for ½)."""
    counts = np.bincount(codes, minlength=n_categories).astype(np.float64) + pseudo_count
    with np.errstate(divide="ignore"):
        return np.log(counts / counts.sum())


# ---------------------------------------------------------------------------------------------
# Column access with errors that name the column and row
# ---------------------------------------------------------------------------------------------
def _numeric_column(df: pd.DataFrame, column: str, what: str) -> np.ndarray:
    if column not in df.columns:
        raise KeyError(f"{what}: column {column!r} is missing; present: {list(df.columns)}")
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what}: column {column!r} row {row} is {_plain(df[column].iloc[row])!r}, "
                         f"expected a finite number")
    return values


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds, for messages."""
    return value.item() if hasattr(value, "item") else value


def _code_column(df: pd.DataFrame, column: str, n_categories: int | None, what: str) -> np.ndarray:
    values = _numeric_column(df, column, what)
    codes = values.astype(np.int64)
    bad = (codes != values) | (codes < 0) | (False if n_categories is None else codes >= n_categories)
    if np.any(bad):
        row = int(np.flatnonzero(bad)[0])
        allowed = "a code >= 0" if n_categories is None else f"a code in 0..{n_categories - 1}"
        raise ValueError(f"{what}: categorical column {column!r} row {row} is {_plain(df[column].iloc[row])!r}, "
                         f"expected {allowed}")
    return codes


def _kind(kind: FeatureKind | str) -> FeatureKind:
    try:
        return FeatureKind(kind)
    except ValueError:
        raise ValueError(f"kind {kind!r} is not one of: {', '.join(k.value for k in FeatureKind)}") from None


def distinct_inputs(X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(distinct rows, each row's index among them) of a one-column design matrix whose distinct values are at most
    a DISTINCT_SHARE of its rows, else None. BAL's r̂ is one score per shown (query, document), so p(x | r̂) over
    millions of impressions needs the network on a few thousand values; the sort costs less than one pass."""
    if X.ndim != 2 or X.shape[1] != 1 or len(X) < DISTINCT_MIN_ROWS:
        return None
    values, inverse = np.unique(X[:, 0], return_inverse=True)
    if len(values) > DISTINCT_SHARE * len(X):
        return None
    return values[:, None], inverse.ravel()


def _gathered(params: tuple[torch.Tensor, ...], rows: np.ndarray) -> tuple[torch.Tensor, ...]:
    index = torch.as_tensor(rows)
    return tuple(p[index] for p in params)


def _mlp(n_in: int, hidden: Sequence[int], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = n_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


def _device(name: str) -> torch.device:
    """`bal.influence.device` as a torch device: "train" is resolved by BAL (`fit_influence_estimators`' `device`);
    a density fitted on its own then runs on the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device("cpu" if name == "train" else name)


# ---------------------------------------------------------------------------------------------
# One conditional density
# ---------------------------------------------------------------------------------------------
class ConditionalDensity:
    """p(x | parents) of one page feature: an MLP with a Gaussian or categorical head (Eq. 6–7).

    Parameters: `kind` of the target feature; `parents` (node columns; empty for p(x));
    `n_categories` of a categorical target (codes 0..n-1; None: max code seen in fit + 1);
    `parent_categories` maps each categorical parent to its number of codes (other parents are
    numeric); `config`; `seed` (initial weights, validation split, batch order).
    Learned: `column_`, `n_categories_`, input/target standardisation, `net_` (None when
    unconditional, then `marginal_` holds the closed-form parameters) and `history_`.
    """

    def __init__(self, kind: FeatureKind | str, parents: Sequence[str] = (), n_categories: int | None = None,
                 parent_categories: Mapping[str, int] | None = None, config: InfluenceConfig | None = None,
                 seed: int = 0):
        self.kind = _kind(kind)
        self.parents = tuple(parents)
        self.n_categories = n_categories
        self.parent_categories = dict(parent_categories or {})
        self.config = config or InfluenceConfig()
        self.seed = int(seed)
        unknown = sorted(set(self.parent_categories) - set(self.parents))
        if unknown:
            raise ValueError(f"parent_categories names {unknown}, which are not among the parents {list(self.parents)}")
        for name, k in self.parent_categories.items():
            if int(k) < 1:
                raise ValueError(f"parent_categories[{name!r}]: expected a number of codes >= 1, got {k!r}")
        if n_categories is not None and self.kind is not FeatureKind.CATEGORICAL:
            raise ValueError(f"n_categories is for categorical targets; kind is {self.kind.value!r}")
        if n_categories is not None and int(n_categories) < 2:
            raise ValueError(f"n_categories: expected >= 2 codes (0 = unknown, 1..K), got {n_categories!r}")

    # -- properties -----------------------------------------------------------------------------
    @property
    def categorical(self) -> bool:
        return self.kind is FeatureKind.CATEGORICAL

    @property
    def numeric_parents(self) -> tuple[str, ...]:
        return tuple(p for p in self.parents if p not in self.parent_categories)

    @property
    def categorical_parents(self) -> tuple[str, ...]:
        return tuple(p for p in self.parents if p in self.parent_categories)

    def _what(self) -> str:
        column = getattr(self, "column_", "?")
        return f"p({column} | {', '.join(self.parents) or '∅'})"

    def _check_fitted(self) -> None:
        if not hasattr(self, "column_"):
            raise RuntimeError(f"{type(self).__name__}({self.kind.value}, parents={list(self.parents)}) is not "
                               f"fitted; call fit(nodes_df, feature) first")

    # -- design matrices ------------------------------------------------------------------------
    def _inputs(self, df: pd.DataFrame) -> np.ndarray:
        """The masked input Z_{π_i} (Eq. 6): standardised numeric parents, then one-hot categorical parents."""
        what = self._what()
        blocks = []
        if self.numeric_parents:
            numeric = np.column_stack([_numeric_column(df, p, what) for p in self.numeric_parents])
            blocks.append((numeric - self.input_mean_) / self.input_scale_)
        for p in self.categorical_parents:
            k = int(self.parent_categories[p])
            codes = _code_column(df, p, k, what)
            blocks.append(np.eye(k, dtype=np.float64)[codes])
        if not blocks:
            return np.zeros((len(df), 0), dtype=np.float64)
        return np.concatenate(blocks, axis=1)

    def _targets(self, df: pd.DataFrame) -> np.ndarray:
        if self.categorical:
            return _code_column(df, self.column_, self.n_categories_, self._what())
        return (_numeric_column(df, self.column_, self._what()) - self.target_mean_) / self.target_scale_

    def _head(self, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Network output H (Eq. 6) → distribution parameters: (mean, std) or (log_probs,)."""
        if self.categorical:
            return (torch.log_softmax(out, dim=1),)
        return out[:, 0], self.config.min_std + torch.exp(out[:, 1].clamp(max=_MAX_LOG_STD))

    def _log_lik(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        params = self._head(out)
        if self.categorical:
            return categorical_log_prob(y, params[0])
        return gaussian_log_prob(y, *params)

    # -- fit ------------------------------------------------------------------------------------
    def fit(self, nodes_df: pd.DataFrame, feature: str,
            warm_start: ConditionalDensity | None = None) -> ConditionalDensity:
        """Maximum-likelihood fit (Eq. 7) of p(nodes_df[feature] | nodes_df[parents]).

        `warm_start`, a fitted density of the same feature, kind, parents and codes (BAL's previous epoch),
        gives the network its starting weights: r̂ moves a little between epochs, so early stopping then
        ends the fit within a few epochs instead of training from scratch.
        """
        if feature in self.parents:
            raise ValueError(f"feature {feature!r} cannot be among its own parents {list(self.parents)}")
        if len(nodes_df) < 2:
            raise ValueError(f"p({feature} | …): need at least 2 rows to fit, got {len(nodes_df)}")
        self.column_ = feature
        what = self._what()
        if self.categorical:
            codes = _code_column(nodes_df, feature, self.n_categories, what)
            self.n_categories_ = (int(self.n_categories) if self.n_categories is not None
                                  else max(int(codes.max()) + 1, 2))
            self.target_mean_, self.target_scale_ = 0.0, 1.0
        else:
            y = _numeric_column(nodes_df, feature, what)
            self.n_categories_ = None
            self.target_mean_ = float(y.mean())
            std = float(y.std())
            self.target_scale_ = std if std > 0 else 1.0
        if self.numeric_parents:
            numeric = np.column_stack([_numeric_column(nodes_df, p, what) for p in self.numeric_parents])
            self.input_mean_ = numeric.mean(axis=0)
            scale = numeric.std(axis=0)
            self.input_scale_ = np.where(scale > 0, scale, 1.0)
        else:
            self.input_mean_ = np.zeros(0)
            self.input_scale_ = np.ones(0)
        y = self._targets(nodes_df)
        X = self._inputs(nodes_df)
        if X.shape[1] == 0:
            self._fit_closed_form(y)
        else:
            self._fit_network(X, y, self._start_state(warm_start))
        return self

    def _start_state(self, other: ConditionalDensity | None) -> dict[str, torch.Tensor] | None:
        """`other`'s network weights when it models the same thing with the same shapes, else None."""
        if other is None or getattr(other, "net_", None) is None:
            return None
        same = (other.kind is self.kind and other.parents == self.parents and other.column_ == self.column_
                and other.n_categories_ == self.n_categories_ and other.parent_categories == self.parent_categories
                and list(other.config.hidden) == list(self.config.hidden))
        return copy.deepcopy(other.net_.state_dict()) if same else None

    def _fit_closed_form(self, y: np.ndarray) -> None:
        self.net_ = None
        if self.categorical:
            self.marginal_ = categorical_frequencies(y, self.n_categories_)
        else:
            self.marginal_ = np.array(gaussian_mle(y, self.config.min_std))
        self.history_ = {"closed_form": True, "epochs_run": 0, "best_epoch": 0, "train_nll": [], "valid_nll": []}

    def _fit_network(self, X: np.ndarray, y: np.ndarray, initial: dict[str, torch.Tensor] | None = None) -> None:
        cfg = self.config
        device = _device(cfg.device)
        n = len(y)
        order = np.random.default_rng(self.seed).permutation(n)
        n_valid = int(round(cfg.valid_fraction * n)) if n >= 20 else 0
        valid_idx, train_idx = order[:n_valid], order[n_valid:]
        y_dtype = torch.long if self.categorical else torch.float32
        Xt = torch.as_tensor(X, dtype=torch.float32, device=device)
        yt = torch.as_tensor(y, dtype=y_dtype, device=device)
        X_train, y_train = Xt[train_idx], yt[train_idx]
        X_valid, y_valid = Xt[valid_idx], yt[valid_idx]
        n_out = self.n_categories_ if self.categorical else 2
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = _mlp(X.shape[1], cfg.hidden, n_out)
            if initial is not None:
                net.load_state_dict(initial)
            net = net.to(device)
        generator = torch.Generator().manual_seed(self.seed)
        optimiser = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, factor=cfg.lr_decay, patience=cfg.lr_patience,
                                                             threshold=cfg.min_delta, threshold_mode="abs")
        best, best_state, best_epoch, stale = math.inf, copy.deepcopy(net.state_dict()), 0, 0
        train_curve, valid_curve = [], []
        n_train = len(train_idx)
        for epoch in range(1, cfg.epochs + 1):
            net.train()
            perm = torch.randperm(n_train, generator=generator).to(device)
            total = torch.zeros((), dtype=torch.float64, device=device)   # on the device: no sync a batch (the
            for start in range(0, n_train, cfg.batch_size):                 # same float64 sums as Python floats)
                batch = perm[start:start + cfg.batch_size]
                loss = -self._log_lik(net(X_train[batch]), y_train[batch]).mean()   # Eq. 7, negated
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                total += loss.detach().double() * len(batch)
            train_curve.append(float(total) / n_train)
            if n_valid == 0:
                best_state, best_epoch = copy.deepcopy(net.state_dict()), epoch
                continue
            net.eval()
            with torch.no_grad():
                valid_nll = float(-self._log_lik(net(X_valid), y_valid).mean())
            valid_curve.append(valid_nll)
            plateau.step(valid_nll)
            if valid_nll < best - cfg.min_delta:
                best, best_state, best_epoch, stale = valid_nll, copy.deepcopy(net.state_dict()), epoch, 0
            else:
                stale += 1
                if stale >= cfg.patience:
                    break
        net.load_state_dict(best_state)
        net.eval()
        self.net_ = net                  # stays on its device: the weights' passes over every row run there too
        self.marginal_ = None
        self.history_ = {"closed_form": False, "epochs_run": len(train_curve), "best_epoch": best_epoch,
                         "warm_start": initial is not None, "train_nll": train_curve, "valid_nll": valid_curve,
                         "n_train": int(n_train), "n_valid": int(n_valid)}

    # -- predict --------------------------------------------------------------------------------
    def _params(self, nodes_df: pd.DataFrame, inputs: np.ndarray | None = None) -> tuple[torch.Tensor, ...]:
        """Distribution parameters per row, in standardised units for a Gaussian head (`inputs`: the rows'
        design matrix when the caller already built it). A one-column design with few distinct values (r̂ alone,
        one score per shown document) runs the network once per value (`distinct_inputs`)."""
        n = len(nodes_df)
        if self.net_ is None:
            theta = torch.as_tensor(self.marginal_, dtype=torch.float64)
            if self.categorical:
                return (theta.unsqueeze(0).expand(n, -1),)
            return theta[0].expand(n), theta[1].expand(n)
        X = self._inputs(nodes_df) if inputs is None else inputs
        distinct = distinct_inputs(X)
        if distinct is not None:
            values, inverse = distinct
            return _gathered(self._network_params(values), inverse)
        return self._network_params(X)

    def _network_params(self, X: np.ndarray) -> tuple[torch.Tensor, ...]:
        """The head's parameters (float64, on the CPU) of each row of the design matrix X, `_PREDICT_CHUNK` rows at a
        time, run on the network's device (the fit's: `bal.influence.device`)."""
        device = next(self.net_.parameters()).device
        X = torch.as_tensor(X, dtype=torch.float32)
        parts = []
        with torch.no_grad():
            for start in range(0, len(X), _PREDICT_CHUNK):
                parts.append(self._head(self.net_(X[start:start + _PREDICT_CHUNK].to(device))))
        if not parts:
            with torch.no_grad():
                parts = [self._head(self.net_(X.to(device)))]
        return tuple(torch.cat([p[i] for p in parts]).double().cpu() for i in range(len(parts[0])))

    def log_prob(self, nodes_df: pd.DataFrame) -> np.ndarray:
        """log p(x | parents) of each row's observed value (a density in x's units, or a probability)."""
        self._check_fitted()
        return self._log_prob_of(self._targets(nodes_df), self._params(nodes_df))

    def _log_prob_of(self, targets: np.ndarray, params: tuple[torch.Tensor, ...]) -> np.ndarray:
        if self.categorical:
            return categorical_log_prob(torch.as_tensor(targets), params[0]).numpy().astype(np.float64)
        y = torch.as_tensor(targets, dtype=torch.float64)
        return (gaussian_log_prob(y, *params) - math.log(self.target_scale_)).numpy()   # Jacobian of standardising

    def log_prob_permuted(self, nodes_df: pd.DataFrame, parent: str, orders: Sequence[np.ndarray],
                          observed: bool = False) -> np.ndarray:
        """(len(orders), rows): log p(x | parents) with the numeric parent's column replaced by its values in
        each order — the same numbers as `log_prob` on such copies of `nodes_df`, with the design matrix and
        targets built once instead of once per order (BAL's permutation numerator). With `observed`, a first row
        more: `log_prob` itself, from the same design matrix (the weight's denominator, at no second build)."""
        self._check_fitted()
        if parent not in self.numeric_parents:
            raise ValueError(f"{parent!r} is not a numeric parent of {self._what()}")
        targets = self._targets(nodes_df)
        if self.net_ is None:                      # unconditional: no parent to permute
            row = self._log_prob_of(targets, self._params(nodes_df))
            return np.stack([row] * (len(orders) + observed))
        inputs = self._inputs(nodes_df)
        distinct = distinct_inputs(inputs)
        if distinct is not None:               # r̂ alone: a permutation only reorders the same distinct values
            values, inverse = distinct
            params = self._network_params(values)
            return np.stack([self._log_prob_of(targets, _gathered(params, rows))
                             for rows in ([inverse] if observed else []) + [inverse[order] for order in orders]])
        # every row through the network (`distinct_inputs` said no once: a permutation cannot change its answer)
        out = [self._log_prob_of(targets, self._network_params(inputs))] if observed else []
        j = self.numeric_parents.index(parent)
        column = _numeric_column(nodes_df, parent, self._what())
        for order in orders:                        # the elementwise standardisation of `_inputs`, on the drawn rows
            inputs[:, j] = (np.asarray(column[order], np.float64) - self.input_mean_[j]) / self.input_scale_[j]
            out.append(self._log_prob_of(targets, self._network_params(inputs)))
        return np.stack(out)

    def score(self, nodes_df: pd.DataFrame) -> float:
        """Mean log-likelihood per row (higher is better), the objective of Eq. 7."""
        return float(self.log_prob(nodes_df).mean())

    def predict_params(self, nodes_df: pd.DataFrame) -> dict[str, np.ndarray]:
        """Per-row distribution: {"mean", "std"} in x's units, or {"proba"} of shape (rows, n_categories_)."""
        self._check_fitted()
        params = self._params(nodes_df)
        if self.categorical:
            return {"proba": params[0].exp().numpy()}
        mean, std = params
        return {"mean": mean.numpy() * self.target_scale_ + self.target_mean_,
                "std": std.numpy() * self.target_scale_}

    # -- persistence ----------------------------------------------------------------------------
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able description, named arrays): everything load needs, no pickle."""
        self._check_fitted()
        meta = {"format": DENSITY_FORMAT, "kind": self.kind.value, "parents": list(self.parents),
                "n_categories": self.n_categories, "parent_categories": self.parent_categories,
                "config": asdict(self.config), "seed": self.seed, "column": self.column_,
                "n_categories_fitted": self.n_categories_,
                "target_mean": self.target_mean_, "target_scale": self.target_scale_,
                "history": self.history_}
        arrays = {"input_mean": np.asarray(self.input_mean_, np.float64),
                  "input_scale": np.asarray(self.input_scale_, np.float64)}
        if self.net_ is None:
            arrays["marginal"] = np.asarray(self.marginal_, np.float64)
        else:
            for name, tensor in self.net_.state_dict().items():
                arrays[f"net.{name}"] = tensor.detach().cpu().numpy()
        return meta, arrays

    @classmethod
    def from_state(cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                   where: str = "state") -> ConditionalDensity:
        if meta.get("format") != DENSITY_FORMAT:
            raise ValueError(f"{where}: format {meta.get('format')!r} is not {DENSITY_FORMAT!r}")
        model = cls(meta["kind"], meta["parents"], meta["n_categories"], meta["parent_categories"],
                    InfluenceConfig(**meta["config"]), meta["seed"])
        model.column_ = meta["column"]
        model.n_categories_ = meta["n_categories_fitted"]
        model.target_mean_, model.target_scale_ = float(meta["target_mean"]), float(meta["target_scale"])
        model.history_ = dict(meta["history"])
        model.input_mean_ = np.asarray(arrays["input_mean"], np.float64)
        model.input_scale_ = np.asarray(arrays["input_scale"], np.float64)
        if "marginal" in arrays:
            model.net_, model.marginal_ = None, np.asarray(arrays["marginal"], np.float64)
            return model
        n_in = len(model.numeric_parents) + sum(int(model.parent_categories[p]) for p in model.categorical_parents)
        n_out = model.n_categories_ if model.categorical else 2
        net = _mlp(n_in, model.config.hidden, n_out)
        state = {name[len("net."):]: torch.from_numpy(np.array(a))
                 for name, a in arrays.items() if name.startswith("net.")}
        try:
            net.load_state_dict(state)
        except RuntimeError as e:
            raise ValueError(f"{where}: network weights do not match p({model.column_} | {', '.join(model.parents)}) "
                             f"with hidden {model.config.hidden}: {e}") from None
        net.eval()
        model.net_, model.marginal_ = net, None
        return model

    def save(self, directory: str | Path) -> None:
        """Write density.json and density.safetensors into `directory` (created if needed)."""
        meta, arrays = self.to_state()
        _write_pair(Path(directory), DENSITY_JSON, meta, DENSITY_TENSORS, arrays)

    @classmethod
    def load(cls, directory: str | Path) -> ConditionalDensity:
        directory = Path(directory)
        meta = json.loads((directory / DENSITY_JSON).read_text())
        return cls.from_state(meta, load_file(str(directory / DENSITY_TENSORS)), str(directory / DENSITY_JSON))


def _write_pair(directory: Path, json_name: str, meta: Any, tensors_name: str, arrays: dict[str, np.ndarray]) -> None:
    """Write JSON + safetensors beside each other: each to a temporary name, then renamed."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp_tensors = directory / f".{tensors_name}.tmp"
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()} or {"_none": np.zeros(0)}, str(tmp_tensors))
    tmp_json = directory / f".{json_name}.tmp"
    tmp_json.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp_tensors, directory / tensors_name)
    os.replace(tmp_json, directory / json_name)


def _read_pair(directory: Path, json_name: str, fmt: str, tensors_name: str) -> tuple[Path, dict, dict]:
    """What `_write_pair` wrote: (JSON path, its state with the format checked, the tensors by name)."""
    path = directory / json_name
    state = json.loads(path.read_text())
    if state.get("format") != fmt:
        raise ValueError(f"{path}: format {state.get('format')!r} is not {fmt!r}")
    return path, state, load_file(str(directory / tensors_name))


# ---------------------------------------------------------------------------------------------
# Every confounded feature of a BiasReport
# ---------------------------------------------------------------------------------------------
@dataclass
class FeatureInfluence:
    """The fitted densities one confounded feature's importance weight needs (BAL §3.2).

    `denominator` is the influence score p(x | r̂, m) (Eq. 6–7); `numerator` is p(x) (case 1) or
    p(x | m) (case 2) as a fitted model, or None when weights.py averages the denominator over
    permuted relevance scores instead.
    """

    feature: str
    case: int
    parents: tuple[str, ...]
    denominator: ConditionalDensity
    numerator: ConditionalDensity | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "case": self.case, "parents": list(self.parents),
                "numerator": "permutation" if self.numerator is None else "model",
                "denominator_history": _history_summary(self.denominator),
                "numerator_history": None if self.numerator is None else _history_summary(self.numerator)}


def _history_summary(model: ConditionalDensity) -> dict[str, Any]:
    h = model.history_
    return {"closed_form": h["closed_form"], "epochs_run": h["epochs_run"], "best_epoch": h["best_epoch"],
            "warm_start": bool(h.get("warm_start", False)),
            "best_valid_nll": min(h["valid_nll"]) if h["valid_nll"] else None}


def _derived_seed(seed: int, index: int, role: int) -> int:
    return int(np.random.SeedSequence([int(seed), index, role]).generate_state(1)[0])


def fit_influence_estimators(nodes_df: pd.DataFrame, bias_report: BiasReport, kinds: Mapping[str, FeatureKind | str],
                             config: InfluenceConfig | None = None, seed: int = 0,
                             n_categories: Mapping[str, int] | None = None,
                             previous: Mapping[str, FeatureInfluence] | None = None,
                             device: torch.device | str | None = None) -> dict[str, FeatureInfluence]:
    """Fit p(x | parents) and the numerator model for every confounded feature of `bias_report`.

    `kinds` maps page features to their kind; r̂ and c are numeric nodes. `n_categories` maps a
    categorical feature to its number of codes (the encoder's vocabulary size + 1); a categorical
    feature not in it gets max code in `nodes_df` + 1. `previous` (the last epoch's estimators) warm-starts
    each density that models the same thing (`ConditionalDensity.fit`), when `config.warm_start`. `device` (BAL's
    training device) is where the networks fit and run when `config.device` is "train".
    """
    config = config or InfluenceConfig()
    if config.device == "train" and device is not None:
        config = replace(config, device=str(torch.device(device)))
    n_categories = dict(n_categories or {})

    def kind_of(name: str, role: str) -> FeatureKind:
        if name in (RELEVANCE_SCORE, CLICK):
            return FeatureKind.CONTINUOUS
        if name not in kinds:
            raise KeyError(f"kinds: no kind for {role} {name!r}; kinds given for: {sorted(kinds)}")
        return _kind(kinds[name])

    def codes_of(name: str) -> int:
        if name in n_categories:
            return int(n_categories[name])
        return max(int(_code_column(nodes_df, name, None, f"categorical feature {name!r}").max()) + 1, 2)

    out: dict[str, FeatureInfluence] = {}
    for index, confounded in enumerate(bias_report.confounded):
        x, parents = confounded.feature, tuple(confounded.parents)
        if RELEVANCE_SCORE not in parents:
            raise ValueError(f"confounded feature {x!r}: parents {list(parents)} lack {RELEVANCE_SCORE!r}")
        kind = kind_of(x, "confounded feature")
        parent_kinds = {p: kind_of(p, f"parent of {x!r}") for p in parents}
        target_codes = codes_of(x) if kind is FeatureKind.CATEGORICAL else None

        before = (previous or {}).get(x) if config.warm_start else None

        def density(ps: tuple[str, ...], role: int, x: str = x, kind: FeatureKind = kind,   # this feature's, bound
                    parent_kinds: dict = parent_kinds, target_codes: int | None = target_codes,
                    before: Any = before, index: int = index) -> ConditionalDensity:
            cats = {p: codes_of(p) for p in ps if parent_kinds[p] is FeatureKind.CATEGORICAL}
            start = None if before is None else (before.denominator if role == 0 else before.numerator)
            return ConditionalDensity(kind, ps, target_codes, cats, config,
                                      _derived_seed(seed, index, role)).fit(nodes_df, x, warm_start=start)

        denominator = density(parents, 0)                                   # p(x | r̂, m), Eq. 6–7
        others = tuple(p for p in parents if p != RELEVANCE_SCORE)
        wants_model = config.numerator == "model" or (config.numerator == "auto" and confounded.case == 1)
        numerator = density(others, 1) if wants_model else None             # p(x) or p(x | m)
        out[x] = FeatureInfluence(x, int(confounded.case), parents, denominator, numerator)
    return out


def save_influence_estimators(estimators: Mapping[str, FeatureInfluence], directory: str | Path) -> None:
    """Write influence.json (one entry per feature) and influence.safetensors into `directory`."""
    state, arrays = influence_state(estimators)
    _write_pair(Path(directory), INFLUENCE_JSON, state, INFLUENCE_TENSORS, arrays)


def influence_state(estimators: Mapping[str, FeatureInfluence]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(JSON-able description, named arrays) of `estimators`: what influence.json and influence.safetensors hold
    (and BAL's per-epoch checkpoint, `bal.method.EpochState`)."""
    entries, arrays = [], {}
    for i, (name, est) in enumerate(estimators.items()):
        entry = {"feature": name, "case": est.case, "parents": list(est.parents)}
        for role in ("denominator", "numerator"):
            model = getattr(est, role)
            if model is None:
                entry[role] = None
                continue
            meta, tensors = model.to_state()
            entry[role] = meta
            arrays.update({f"{i}.{role}.{k}": v for k, v in tensors.items()})
        entries.append(entry)
    return {"format": INFLUENCE_FORMAT, "features": entries}, arrays


def load_influence_estimators(directory: str | Path) -> dict[str, FeatureInfluence]:
    """The estimators `save_influence_estimators` wrote to `directory`, by feature name."""
    path, state, tensors = _read_pair(Path(directory), INFLUENCE_JSON, INFLUENCE_FORMAT, INFLUENCE_TENSORS)
    return estimators_from_state(state, tensors, str(path))


def estimators_from_state(state: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
                          path: str = "state") -> dict[str, FeatureInfluence]:
    """The estimators `influence_state` described, by feature name."""
    out: dict[str, FeatureInfluence] = {}
    for i, entry in enumerate(state["features"]):
        models = {}
        for role in ("denominator", "numerator"):
            if entry[role] is None:
                models[role] = None
                continue
            prefix = f"{i}.{role}."
            arrays = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            models[role] = ConditionalDensity.from_state(entry[role], arrays, f"{path}: features[{i}].{role}")
        out[entry["feature"]] = FeatureInfluence(entry["feature"], int(entry["case"]), tuple(entry["parents"]),
                                                 models["denominator"], models["numerator"])
    return out
