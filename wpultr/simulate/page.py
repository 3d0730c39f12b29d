"""Whole-page presentation of the shown results: media type, result height, the most of it ever on screen,
and the context bias factors — the page (SEPP) features BAL's causal graph is over (BAL §4.1).

serp_max_show_height is the largest part of a result visible on screen at one time during the session:
the page is laid out top-down (rows of `columns` results, a row as tall as its tallest result), the user
scrolls down `scroll depth` px (exponential, `scroll_screens` screens on average) and a result whose top
lies at y shows min(height, screen, scroll + screen - y) px, at least 0. Its parents are therefore its own
serp_height and its position; the scroll depth and the heights of the results above are its noise.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schema import BAIDU_PAGE_FEATURES, POSITION
from ..settings.simulate import SimulateConfig
from .corpus import Corpus

MEDIA_TYPE = "media_type"
SERP_HEIGHT = "serp_height"
SERP_MAX_SHOW_HEIGHT = "serp_max_show_height"
PAGE_COLUMNS: tuple[str, ...] = (POSITION, MEDIA_TYPE, SERP_HEIGHT, SERP_MAX_SHOW_HEIGHT)
if set(PAGE_COLUMNS) != {f.name for f in BAIDU_PAGE_FEATURES}:
    raise ImportError(f"schema.BAIDU_PAGE_FEATURES no longer names the simulator's page columns {PAGE_COLUMNS}")
MIN_HEIGHT = 40.0          # px: the smallest result a page lays out
CONTEXT_PREFIX = "context_"


def context_columns(n_factors: int) -> list[str]:
    """Names of the context bias factor columns: context_0, context_1, ..."""
    return [f"{CONTEXT_PREFIX}{k}" for k in range(n_factors)]


@dataclass(frozen=True)
class Page:
    """The shown results of a batch of sessions, arrays of shape (n_sessions, k) in position order."""

    label: np.ndarray                 # int8: true relevance grade 0..4
    position: np.ndarray              # int16: 1..k
    media_type: np.ndarray            # int64
    serp_height: np.ndarray           # float64 px (whole pixels)
    serp_max_show_height: np.ndarray  # float64 px (whole pixels)
    features: np.ndarray              # float32 (n_sessions, k, n_dense_features)
    context: np.ndarray               # int64 (n_sessions, k, n_context_factors): level of each factor
    context_scale: np.ndarray         # float64: product of the context levels' examination scales

    @property
    def shape(self) -> tuple[int, int]:
        return self.label.shape


def draw_context_scales(n_factors: int, n_levels: int, strength: float, rng: np.random.Generator) -> np.ndarray:
    """(n_factors, n_levels) examination scale of each context level, uniform in [1 - strength, 1]."""
    return rng.uniform(1.0 - strength, 1.0, size=(n_factors, n_levels))


def result_heights(media_type: np.ndarray, cfg: SimulateConfig, rng: np.random.Generator) -> np.ndarray:
    """Height in whole px: the type's mean height times a mean-one log-normal factor."""
    sigma = cfg.height_spread
    factor = np.exp(sigma * rng.standard_normal(media_type.shape) - sigma ** 2 / 2)
    return np.maximum(np.round(np.asarray(cfg.media_heights)[media_type] * factor), MIN_HEIGHT)


def result_tops(heights: np.ndarray, columns: int) -> np.ndarray:
    """y offset of each result's top: rows of `columns` results, each row as tall as its tallest result."""
    n_sessions, k = heights.shape
    n_rows = -(-k // columns)
    padded = np.zeros((n_sessions, n_rows * columns))
    padded[:, :k] = heights
    row_height = padded.reshape(n_sessions, n_rows, columns).max(axis=2)
    row_top = np.cumsum(row_height, axis=1) - row_height
    return row_top[:, np.arange(k) // columns]


def max_show_heights(heights: np.ndarray, columns: int, cfg: SimulateConfig, rng: np.random.Generator) -> np.ndarray:
    """The most of each result on screen at once, for a session scrolling down an exponential depth."""
    screen = cfg.screen_height
    scroll = screen * rng.exponential(cfg.scroll_screens, size=(heights.shape[0], 1)) if cfg.scroll_screens > 0 \
        else np.zeros((heights.shape[0], 1))
    visible = np.minimum(np.minimum(heights, screen), scroll + screen - result_tops(heights, columns))
    return np.round(np.maximum(visible, 0.0))


def presented_media(doc_media: np.ndarray, cfg: SimulateConfig, rng: np.random.Generator) -> np.ndarray:
    """Each impression's media type: its document's own with chance `media_type_consistency`, otherwise
    one drawn from `media_type_probs` — the same page shown with a video card in one session and as plain
    text in the next. Nothing is drawn at consistency 1, so such runs replay exactly."""
    if cfg.media_type_consistency >= 1.0:
        return doc_media
    probs = np.asarray(cfg.media_type_probs, dtype=np.float64)
    other = rng.choice(len(probs), size=doc_media.shape, p=probs / probs.sum())
    keep = rng.random(doc_media.shape) < cfg.media_type_consistency
    return np.where(keep, doc_media, other).astype(np.int64)


def build_page(doc_rows: np.ndarray, corpus: Corpus, cfg: SimulateConfig, columns: int,
               context_scales: np.ndarray, rng: np.random.Generator, media_type: np.ndarray | None = None) -> Page:
    """Lay out the shown documents (n_sessions, k), in position order, as one page per session; `media_type`
    is each impression's presented type (default: the documents' own)."""
    n_sessions, k = doc_rows.shape
    media_type = corpus.media_type[doc_rows] if media_type is None else media_type
    heights = result_heights(media_type, cfg, rng)
    n_factors, n_levels = context_scales.shape
    context = rng.integers(0, n_levels, size=(n_sessions, k, n_factors))
    scale = np.ones((n_sessions, k))
    for factor in range(n_factors):
        scale *= context_scales[factor][context[:, :, factor]]
    scale = scale * np.asarray(cfg.media_click_scale, dtype=np.float64)[media_type]   # 1s by default: unchanged
    return Page(label=corpus.label[doc_rows], position=np.broadcast_to(np.arange(1, k + 1, dtype=np.int16),
                                                                        (n_sessions, k)),
                media_type=media_type, serp_height=heights,
                serp_max_show_height=max_show_heights(heights, columns, cfg, rng),
                features=corpus.features[doc_rows], context=context, context_scale=scale)
