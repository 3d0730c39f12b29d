"""BAL's click model p(c | parents of c) (Eq. 10, parameters φ_c), parametrised so gradient blocking is exact.

The logit splits into a relevance term and a page term:

    u = softplus(a) · r̂ + b                 (monotone in r̂: the ranker's order is kept)
    v = g_φ(x_parents)                       (MLP over the page features that are parents of c)
    p(c = 1) = σ(u) · σ(v)    multiplicative (examination hypothesis: relevance × page)
             = σ(u + v)       additive

Fitting φ_c (`fit`) holds r̂ fixed and maximises the importance-weighted likelihood of Eq. 10.
The ranker step (`ranker_loss`) uses the same weighted likelihood, but v is computed without a
graph to φ_c (detached) and a, b enter as constants, so the only path from the loss to a trainable
parameter is r̂ = f_Θ(q, d): the ranker learns relevance → click and nothing of the page. The
ranker never reads a page feature, so its scores cannot depend on one. A boosted ranker
(`ranker.backbone: lightgbm`) takes the same likelihood with α = softplus(a), β = b and v as numbers
(`relevance_affine`, `page_logits`) in `losses.boosted.bal_click_*`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy.special import expit

from ..methods.losses.boosted import log_no_click
from ..rankers.mlp import mlp
from ..schema import CLICK, row_spans
from ..settings.bal import ClickModelConfig
from .rows import RAW_POSITION

if TYPE_CHECKING:
    from .rows import TrainingRows


@dataclass(frozen=True)
class PageInputs:
    """The click model's page-feature inputs: numeric columns (BT scores, standardised) and category codes."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    n_categories: tuple[int, ...]

    def tensors(self, nodes: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor]:
        numeric = torch.as_tensor(nodes[list(self.numeric)].to_numpy(np.float32, copy=True)) if self.numeric \
            else torch.zeros((len(nodes), 0))
        codes = torch.as_tensor(nodes[list(self.categorical)].to_numpy(np.int64, copy=True)) if self.categorical \
            else torch.zeros((len(nodes), 0), dtype=torch.long)
        if self.categorical:
            codes = torch.minimum(codes.clamp_min(0), torch.as_tensor(self.n_categories) - 1)
        return numeric, codes


def log_click_likelihood(u: torch.Tensor, v: torch.Tensor, clicks: torch.Tensor, form: str) -> torch.Tensor:
    """log p(c | u, v) per row, computed stably for both forms."""
    if form == "additive":
        return -F.binary_cross_entropy_with_logits(u + v, clicks, reduction="none")
    log_p1 = F.logsigmoid(u) + F.logsigmoid(v)                              # log σ(u)σ(v)
    # 1 − σ(u)σ(v) = (e^{-u} + e^{-v} + e^{-u-v}) / ((1 + e^{-u})(1 + e^{-v}))
    log_p0 = torch.logsumexp(torch.stack([-u, -v, -u - v]), dim=0) - F.softplus(-u) - F.softplus(-v)
    return clicks * log_p1 + (1 - clicks) * log_p0


class ClickModel(torch.nn.Module):
    """p(c | r̂, page parents of c) with a relevance term u(r̂) and a page term v(x)."""

    def __init__(self, page: PageInputs, config: ClickModelConfig):
        super().__init__()
        self.page, self.form = page, config.form
        self.scale = torch.nn.Parameter(torch.tensor(0.5413))    # softplus(0.5413) = 1
        self.bias = torch.nn.Parameter(torch.tensor(0.0))
        self.embeddings = torch.nn.ModuleList(torch.nn.Embedding(n, config.embedding_dim) for n in page.n_categories)
        width = len(page.numeric) + config.embedding_dim * len(page.categorical)
        self.branch = mlp(width, config.hidden, 1) if width else None
        self.config = config

    def relevance_term(self, r: torch.Tensor, detached: bool = False) -> torch.Tensor:
        scale, bias = (self.scale.detach(), self.bias.detach()) if detached else (self.scale, self.bias)
        return F.softplus(scale) * r + bias

    def relevance_affine(self) -> tuple[float, float]:
        """(α, β) of u = α·r̂ + β as plain numbers, α = softplus(a): constants of the boosted ranker's objective."""
        return float(F.softplus(self.scale.detach())), float(self.bias.detach())

    def page_term(self, numeric: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        if self.branch is None:   # no page feature is a parent of c: the page says nothing
            return numeric.new_full((numeric.shape[0],), 20.0 if self.form == "multiplicative" else 0.0)
        parts = [numeric] + [emb(codes[:, i]) for i, emb in enumerate(self.embeddings)]
        return self.branch(torch.cat(parts, dim=1)).squeeze(-1)

    def fit(self, r: np.ndarray, nodes: pd.DataFrame, clicks: np.ndarray, weights: np.ndarray,
            generator: torch.Generator, pairs: np.ndarray | None = None, ranks: Any = None) -> dict[str, float]:
        """Maximise Σ w log p(c | r̂, x) over φ_c with r̂ fixed (Eq. 10); returns the last epoch's mean loss.

        With `pairs` (each row's (query, document) code, `schema.query_document_pairs`), u gets a per-pair
        offset δ, updated before every pass by `document_offsets` (beyond the paper): the same document shown
        at several positions then tells examination from the relevance r̂ misses. δ serves this fit only; the
        ranker step's u is α·r̂ + β as without it. With `ranks` (`training.distributed.RankBatches`, in a DDP rank)
        each global batch's gradient is the ranks' DDP mean over their shares of it: one process's step.

        It runs on the device the model sits on (BAL moves it to the training device): the rows' tensors go there
        once, the batch order is drawn from `generator` on the CPU as before, the offsets' sums stay numpy.
        """
        device = self.scale.device
        numeric, codes = (t.to(device) for t in self.page.tensors(nodes))
        r_t = torch.as_tensor(r, dtype=torch.float32).to(device)
        c_t = torch.as_tensor(clicks, dtype=torch.float32).to(device)
        w_t = torch.as_tensor(weights, dtype=torch.float32).to(device)
        optimizer = torch.optim.Adam(self.parameters(), lr=self.config.learning_rate)
        n, loss_value = len(r_t), float("nan")
        offsets = torch.zeros(n, device=device)
        delta = np.zeros(int(pairs.max()) + 1 if pairs is not None and len(pairs) else 0)
        self.train()

        def likelihood(r: torch.Tensor, offset: torch.Tensor, numeric: torch.Tensor, codes: torch.Tensor,
                       c: torch.Tensor) -> torch.Tensor:
            return log_click_likelihood(self.relevance_term(r) + offset, self.page_term(numeric, codes), c, self.form)
        step = ranks.wrap({"click_model": self}, likelihood) if ranks is not None else likelihood
        for _ in range(self.config.epochs):
            if pairs is not None:
                with torch.no_grad():
                    u = self.relevance_term(r_t).double().cpu().numpy()
                    v = self.page_term(numeric, codes).double().cpu().numpy()
                delta = document_offsets(u, v, clicks, weights, pairs, self.form, self.config.document_ridge, delta)
                offsets = torch.as_tensor(delta[pairs], dtype=torch.float32).to(device)
            order = torch.randperm(n, generator=generator).to(device)
            total = torch.zeros((), dtype=torch.float64, device=device)   # no sync a batch; Python's float64 sums
            for start in range(0, n, self.config.batch_size):
                idx = order[start: start + self.config.batch_size]
                if ranks is None:
                    ll = likelihood(r_t[idx], offsets[idx], numeric[idx], codes[idx], c_t[idx])
                    loss = -(w_t[idx] * ll).mean()
                else:                                       # this rank's share of the global batch, through DDP
                    mine = ranks.part(idx)
                    ll = step(r_t[mine], offsets[mine], numeric[mine], codes[mine], c_t[mine])
                    loss = ranks.mean(-(w_t[mine] * ll).sum(), len(idx))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += (loss.detach().double() if ranks is None
                          else torch.tensor(ranks.value(loss), dtype=torch.float64, device=device)) * len(idx)
            loss_value = float(total) / max(n, 1)
        self.eval()
        stats = {"click_model_nll": loss_value, "relevance_scale": float(F.softplus(self.scale.detach())),
                 "relevance_bias": float(self.bias.detach())}
        if pairs is not None:
            stats["document_offset_sd"] = float(np.std(delta[pairs]))
        return stats

    @torch.no_grad()
    def relevance_logits(self, r: np.ndarray, page_logits: np.ndarray, clicks: np.ndarray, weights: np.ndarray,
                         pairs: np.ndarray | None = None, steps: int = 4) -> np.ndarray:
        """u of every row, the click model's belief in each shown result's relevance: α·r̂ + β, plus the row's
        (query, document) offset δ (`document_offsets`, re-estimated over all rows with φ_c fixed) when `pairs`
        are given. A constant of the ranker step, like the page logits."""
        alpha, beta = self.relevance_affine()
        u = alpha * np.asarray(r, np.float64) + beta
        if pairs is None or not len(pairs):
            return u
        codes = np.unique(pairs, return_inverse=True)[1]
        delta = document_offsets(u, np.asarray(page_logits, np.float64), clicks, weights, codes, self.form,
                                 self.config.document_ridge, np.zeros(0), steps=steps)
        return u + delta[codes]

    @torch.no_grad()
    def page_logits(self, nodes: pd.DataFrame, chunk_rows: int = 65536) -> np.ndarray:
        """v(x) for every row: fixed during the ranker step. In chunks, so the branch's activations over
        millions of rows are never held at once; on the model's device."""
        device = self.scale.device
        out = np.empty(len(nodes), dtype=np.float32)
        for start in range(0, len(nodes), chunk_rows):
            numeric, codes = (t.to(device) for t in self.page.tensors(nodes.iloc[start: start + chunk_rows]))
            out[start: start + chunk_rows] = self.page_term(numeric, codes).cpu().numpy()
        return out


def document_offsets(u: np.ndarray, v: np.ndarray, clicks: np.ndarray, weights: np.ndarray, pairs: np.ndarray,
                     form: str, ridge: float, delta: np.ndarray, steps: int = 2) -> np.ndarray:
    """Per-pair offsets δ maximising Σ w log p(c | u + δ_pair, v) − λ/2 Σ δ², u and v held fixed.

    Fisher scoring, one Newton-like step per pair at once (sums by pair through bincount):
    δ ← δ + (Σ w·g − λδ) / (Σ w·I + λ), with, for the row's p = p(c = 1):
    multiplicative p = σ(v)·q, q = σ(u + δ):  g = (c − p)(1 − q)/(1 − p),  I = σ(v)·q(1 − q)²/(1 − p);
    additive p = σ(u + v + δ):               g = c − p,                    I = p(1 − p).
    The ridge (δ ~ N(0, 1/λ)) keeps a pair seen a few times near 0 and makes every step well defined.
    """
    n_pairs = int(pairs.max()) + 1
    delta = np.asarray(delta, np.float64) if len(delta) == n_pairs else np.zeros(n_pairs)
    clicks, weights = np.asarray(clicks, np.float64), np.asarray(weights, np.float64)
    for _ in range(steps):
        logit = u + delta[pairs]
        if form == "additive":
            p = expit(logit + v)
            g, info = clicks - p, p * (1.0 - p)
        else:
            s, q = expit(v), expit(logit)
            p = s * q
            rest = np.maximum(1.0 - p, 1e-12)
            g, info = (clicks - p) * (1.0 - q) / rest, s * q * (1.0 - q) ** 2 / rest
        grad = np.bincount(pairs, weights * g, minlength=n_pairs) - ridge * delta
        delta = delta + grad / (np.bincount(pairs, weights * info, minlength=n_pairs) + ridge)
    return delta


def skipped_irrelevance(relevance_logits: np.ndarray, page_logits: np.ndarray) -> np.ndarray:
    """P(not relevant | not clicked) = (1 − σ(u)) / (1 − σ(u)σ(v)) under the multiplicative model, per row: near 1
    for a result the page made sure was seen (σ(v) → 1), near 1 − σ(u) for one nobody looked at (σ(v) → 0).
    Computed in logs (`losses.boosted.log_no_click`)."""
    u, v = np.asarray(relevance_logits, np.float64), np.asarray(page_logits, np.float64)
    return np.exp(-np.logaddexp(0.0, u) - log_no_click(u, v))


def ranker_loss(click_model: ClickModel, scores: torch.Tensor, page_logits: torch.Tensor, clicks: torch.Tensor,
                weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The weighted likelihood of Eq. 10 as a function of r̂ alone: the page-feature path is blocked.

    `page_logits` are v(x) computed beforehand (constants) and the relevance term's a, b are detached,
    so ∂loss/∂φ_c = 0 and ∂loss/∂x = 0; only the ranker's parameters receive a gradient.
    """
    u = click_model.relevance_term(scores, detached=True)
    v = page_logits.detach()
    if click_model.form == "multiplicative":
        # log_click_likelihood with v a constant, in fewer ops (this runs on every batch of every BAL epoch):
        # log(1 − σ(u)σ(v)) = log(σ(−v) + σ(v)σ(−u)), and log σ(−u) = log σ(u) − u
        log_exam, log_skip, log_su = F.logsigmoid(v), F.logsigmoid(-v), F.logsigmoid(u)
        ll = torch.where(clicks > 0, log_su + log_exam, torch.logaddexp(log_skip, log_exam + log_su - u))
    else:
        ll = log_click_likelihood(u, v, clicks, click_model.form)
    m = mask.float()
    return -(weights * ll * m).sum() / m.sum().clamp_min(1.0)


def page_inputs(parents: Sequence[str], kinds: dict[str, str], n_categories: dict[str, int]) -> PageInputs:
    """Split the page-feature parents of c into numeric and categorical inputs."""
    numeric = tuple(p for p in parents if kinds[p] != "categorical")
    categorical = tuple(p for p in parents if kinds[p] == "categorical")
    return PageInputs(numeric, categorical, tuple(int(n_categories[p]) for p in categorical))


EXAMINATION_INTERVAL = ("95% interval of each cell's mean examination σ(v), its page logits shifted together, the "
                        "relevance term α·r̂ + β held fixed: importance-weighted sandwich, rows independent")
_CELL_SUMS = ("rows", "exam", "slope", "score_sq", "info")


def _row_terms(u: np.ndarray, v: np.ndarray, clicks: np.ndarray, weights: np.ndarray, form: str) -> np.ndarray:
    """Per row of one chunk (`_CELL_SUMS`' order): 1, σ(v), σ'(v), and the squared weighted score and the weighted
    information of a shift t of its cell's page logits (v + t) at t = 0 (`document_offsets`' algebra, u ↔ v)."""
    s = expit(v)
    if form == "additive":
        p = expit(u + v)
        g, info = clicks - p, p * (1.0 - p)
    else:
        q = expit(u)
        rest = np.maximum(1.0 - q * s, 1e-12)
        g, info = (clicks - q * s) * (1.0 - s) / rest, q * s * (1.0 - s) ** 2 / rest
    return np.stack([np.ones_like(s), s, s * (1.0 - s), (weights * g) ** 2, weights * info])


def _cell_sums(cells: np.ndarray, terms: np.ndarray, n_cells: int) -> np.ndarray:
    """`_row_terms` summed by cell (codes 0..n_cells-1)."""
    return np.stack([np.bincount(cells, x, minlength=n_cells) for x in terms])


def _cell_table(levels: np.ndarray, sums: np.ndarray, reference: int) -> dict[str, dict[str, float]]:
    """Each cell's mean examination, its ratio to the reference cell's and the ratio's 95 % interval (delta
    method on the log ratio, the two cells' shifts independent; the reference's own ratio is 1 by definition)."""
    rows, exam, slope, score_sq, info = sums
    mean = exam / np.maximum(rows, 1)
    se_shift = np.sqrt(score_sq) / np.maximum(info, 1e-300)              # sandwich: √Σ(wg)² / Σ wI
    se_log = slope / np.maximum(exam, 1e-300) * se_shift                 # d log E / dt = Σσ' / Σσ
    out = {}
    for i, level in enumerate(levels):
        if not rows[i]:
            continue
        ratio = mean[i] / mean[reference]
        half = 0.0 if i == reference else 1.96 * float(np.hypot(se_log[i], se_log[reference]))
        out[str(level)] = {"rows": int(rows[i]), "examination": round(float(mean[i]), 5),
                           "relative": round(float(ratio), 5), "low": round(float(ratio * np.exp(-half)), 5),
                           "high": round(float(ratio * np.exp(half)), 5)}
    return out


def examination_table(model: ClickModel, r: np.ndarray, page_logits: np.ndarray, weights: np.ndarray,
                      rows: TrainingRows) -> dict[str, Any]:
    """The learned examination σ(v) by position and by each categorical page feature's level (its codes), each
    relative to position 1 / the most shown level, with intervals (`EXAMINATION_INTERVAL`): what the run report
    plots. One pass over the rows a chunk at a time."""
    alpha, beta = model.relevance_affine()
    categorical = [f for f, kind in rows.kinds.items() if kind == "categorical"]
    positions = np.unique(rows.positions)
    sums = {f: np.zeros((len(_CELL_SUMS), rows.n_categories[f])) for f in categorical}
    by_position = np.zeros((len(_CELL_SUMS), len(positions)))
    for span in row_spans(rows.nodes.n_rows):
        u = alpha * np.asarray(r[span], np.float64) + beta
        v = np.asarray(page_logits[span], np.float64)
        clicks = np.asarray(rows.nodes.read(CLICK, span.start, span.stop), np.float64)
        w = np.asarray(weights[span], np.float64)
        terms = _row_terms(u, v, clicks, w, model.form)
        cells = np.searchsorted(positions, rows.nodes.read(RAW_POSITION, span.start, span.stop))
        by_position += _cell_sums(cells, terms, len(positions))
        for f in categorical:
            n_codes = rows.n_categories[f]
            codes = np.clip(np.asarray(rows.nodes.read(f, span.start, span.stop), np.int64), 0, n_codes - 1)
            sums[f] += _cell_sums(codes, terms, n_codes)
    levels = {f: {"n_codes": rows.n_categories[f],
                  "codes": _cell_table(np.arange(rows.n_categories[f]), sums[f], int(np.argmax(sums[f][0])))}
              for f in categorical}
    return {"interval": EXAMINATION_INTERVAL, "by_position": _cell_table(positions, by_position, 0), "levels": levels}
