"""The simulated collection: queries with Zipf popularity and frequency buckets, and their candidate
documents with token-id text, dense feature vectors, graded relevance and a media type.

Text carries relevance the way real text does: the higher a document's grade, the more of its query's
terms its title and abstract contain, so a lexical or text model can learn to rank. The dense features
are a noisy non-linear function of the grade, so an MLP can learn relevance from them, but not perfectly.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import BAIDU_TOKEN_SEP, MAX_LABEL, N_BUCKETS, TOKEN_TYPE
from ..settings.simulate import SimulateConfig

LABEL_PROBS = np.array([0.35, 0.30, 0.18, 0.11, 0.06])      # grades 0..4 (bad .. perfect)
TITLE_TERM_PROB = np.array([0.10, 0.30, 0.50, 0.70, 0.90])  # chance a query term is in the title, by grade
ABSTRACT_TERM_RATE = np.array([0.2, 0.5, 0.9, 1.3, 1.8])    # Poisson mean count of each query term, by grade
QUERY_LENGTH = (1, 6)                # inclusive range of query terms
TITLE_FILLER = (3, 9)                # inclusive range of non-query title tokens
ABSTRACT_FILLER = (8, 20)            # inclusive range of non-query abstract tokens
STOPWORD_FRACTION = 0.05             # the most frequent tokens never serve as query terms
FEATURE_LATENT_NOISE = 0.6           # noise on the relevance signal all informative features share
FEATURE_NOISE = 0.3                  # noise added to each informative feature
INFORMATIVE_FRACTION = 0.75          # the rest of the dense features are pure noise


@dataclass(frozen=True)
class Corpus:
    """Queries and documents; the documents of query q are rows q*docs_per_query .. (q+1)*docs_per_query - 1."""

    query_ids: np.ndarray          # str (n_queries,): decimal id text, as schema.QUERY_ID_TYPE holds it
    query_tokens: pa.ListArray     # list<int32>, one per query
    popularity: np.ndarray         # float64, chance that a session issues each query (sums to 1)
    bucket: np.ndarray             # int8, frequency decile of the query, 0 = most frequent
    doc_ids: np.ndarray            # str (n_docs,): md5 of the title and abstract text in the Baidu layout
    doc_query: np.ndarray          # int64 (n_docs,): index of the document's query
    title_tokens: pa.ListArray     # list<int32>, one per document
    abstract_tokens: pa.ListArray  # list<int32>, one per document
    features: np.ndarray           # float32 (n_docs, n_dense_features)
    label: np.ndarray              # int8 (n_docs,): true graded relevance 0..4
    media_type: np.ndarray         # int64 (n_docs,): media type code (see spec.MEDIA_TYPE_NAMES)
    docs_per_query: int
    source: dict[str, Any] | None = None   # real-feature corpora: files, kept and dropped queries (truth.json)
    logging_score: np.ndarray | None = None   # float64 (n_docs,): what the logging ranker scores; None: the grade

    @property
    def logging_base(self) -> np.ndarray:
        """What the logging ranker scores (before its media boost and noise): `logging_score` when the corpus has
        one (`data.simulate.logging_ranker: linear`), else the grade."""
        return self.label if self.logging_score is None else self.logging_score

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    def docs_of(self, query_index: np.ndarray) -> np.ndarray:
        """(len(query_index), docs_per_query) document rows of each query."""
        return query_index[:, None] * self.docs_per_query + np.arange(self.docs_per_query)[None, :]


def zipf_popularity(n: int, exponent: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(popularity, rank): popularity ∝ 1 / (rank + 1)^exponent over a random ranking of n items.

    Computed with libm's pow and an exactly rounded sum, not numpy's vectorised ones, whose last bit changes with
    the numpy build: the bundled sample's truth is reproduced byte for byte on any machine."""
    rank = rng.permutation(n)
    weight = np.array([math.pow(r + 1.0, -exponent) for r in rank.tolist()], dtype=np.float64)
    return weight / math.fsum(weight.tolist()), rank


def frequency_buckets(rank: np.ndarray) -> np.ndarray:
    """Decile of each query by popularity rank (0 = the most frequent tenth), as Baidu-ULTR's buckets."""
    return (rank * N_BUCKETS // len(rank)).astype(np.int8)


def _segments(values: np.ndarray, owner: np.ndarray, n_owners: int, rng: np.random.Generator) -> pa.ListArray:
    """Token lists from (owner, token) pairs, each owner's tokens in random order."""
    order = np.lexsort((rng.random(len(values)), owner))
    offsets = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=n_owners)))).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[order].astype(np.int32)), type=TOKEN_TYPE)


def _query_terms(n_queries: int, vocab_p: np.ndarray, rng: np.random.Generator) -> pa.ListArray:
    """Distinct content-word query terms, 1-6 per query, drawn by background frequency."""
    content = np.argsort(-vocab_p)[int(len(vocab_p) * STOPWORD_FRACTION):]
    content_p = vocab_p[content] / vocab_p[content].sum()
    lengths = rng.integers(QUERY_LENGTH[0], QUERY_LENGTH[1] + 1, size=n_queries)
    draws = content[rng.choice(len(content), size=(n_queries, 4 * QUERY_LENGTH[1]), p=content_p)]
    terms = [list(dict.fromkeys(row.tolist()))[:n] for row, n in zip(draws, lengths, strict=True)]
    return pa.array(terms, type=TOKEN_TYPE)


def _pairs(doc_query: np.ndarray, query_tokens: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """(doc, term) for every term of every document's query."""
    offsets = query_tokens.offsets.to_numpy()
    values = query_tokens.values.to_numpy()
    lengths = np.diff(offsets)[doc_query]
    doc = np.repeat(np.arange(len(doc_query)), lengths)
    start = np.repeat(offsets[doc_query] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return doc, values[start + np.arange(lengths.sum())]


def _document_text(label: np.ndarray, doc_query: np.ndarray, query_tokens: pa.ListArray, vocab_p: np.ndarray,
                   rng: np.random.Generator) -> tuple[pa.ListArray, pa.ListArray]:
    """Titles and abstracts: query terms in proportion to the grade, filled up with background tokens."""
    n_docs = len(label)
    pair_doc, pair_term = _pairs(doc_query, query_tokens)
    in_title = rng.random(len(pair_doc)) < TITLE_TERM_PROB[label[pair_doc]]
    abstract_count = rng.poisson(ABSTRACT_TERM_RATE[label[pair_doc]])
    fields = []
    for (low, high), term_doc, terms in (
            (TITLE_FILLER, pair_doc[in_title], pair_term[in_title]),
            (ABSTRACT_FILLER, np.repeat(pair_doc, abstract_count), np.repeat(pair_term, abstract_count))):
        filler_len = rng.integers(low, high + 1, size=n_docs)
        filler = rng.choice(len(vocab_p), size=int(filler_len.sum()), p=vocab_p)
        owner = np.concatenate((term_doc, np.repeat(np.arange(n_docs), filler_len)))
        fields.append(_segments(np.concatenate((terms, filler)), owner, n_docs, rng))
    return fields[0], fields[1]


def _dense_features(label: np.ndarray, n_features: int, rng: np.random.Generator) -> np.ndarray:
    """Noisy non-linear views of the grade (tanh ramps and bumps of a shared latent), plus noise columns."""
    latent = (label - MAX_LABEL / 2) / (MAX_LABEL / 2) + rng.normal(0.0, FEATURE_LATENT_NOISE, size=len(label))
    n_informative = max(1, int(np.ceil(n_features * INFORMATIVE_FRACTION)))
    out = rng.normal(0.0, 1.0, size=(len(label), n_features))
    for j in range(n_informative):
        if j % 2 == 0:
            slope = rng.uniform(0.5, 2.0) * rng.choice([-1.0, 1.0])
            view = np.tanh(slope * latent + rng.uniform(-1.0, 1.0))
        else:
            view = np.exp(-(latent - rng.uniform(-1.0, 1.0)) ** 2)
        out[:, j] = view + rng.normal(0.0, FEATURE_NOISE, size=len(label))
    return out.astype(np.float32)


def _md5_ids(title: pa.ListArray, abstract: pa.ListArray) -> np.ndarray:
    """md5 of "title<TAB>abstract" with tokens joined as in the Baidu layout (the reader's annotation doc id)."""
    text = [pc.binary_join(pc.cast(field, pa.list_(pa.string())), BAIDU_TOKEN_SEP).to_pylist()
            for field in (title, abstract)]
    ids = np.array([hashlib.md5(f"{t}\t{a}".encode()).hexdigest() for t, a in zip(*text, strict=True)], dtype=object)
    unique, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        dup = unique[counts > 1][0]
        rows = np.flatnonzero(ids == dup).tolist()
        raise ValueError(f"simulated documents {rows} have identical title and abstract text; "
                         f"raise data.simulate.vocab_size")
    return ids


def draw_media_types(label: np.ndarray, cfg: SimulateConfig, rng: np.random.Generator) -> np.ndarray:
    """Each document's own media type: from media_type_probs, tilted by its grade where `media_label_tilt` says so
    (relevant documents more often videos, say); with no tilt the draw is the untilted one, unchanged."""
    probs = np.asarray(cfg.media_type_probs, dtype=np.float64)
    tilt = np.asarray(cfg.media_label_tilt, dtype=np.float64)
    if not tilt.any():
        return rng.choice(len(probs), size=len(label), p=probs / probs.sum()).astype(np.int64)
    weight = probs[None, :] * np.exp(tilt[None, :] * np.asarray(label, np.float64)[:, None] / MAX_LABEL)
    cdf = np.cumsum(weight / weight.sum(axis=1, keepdims=True), axis=1)
    return np.minimum((rng.random(len(label))[:, None] > cdf).sum(axis=1), len(probs) - 1).astype(np.int64)


def build_corpus(cfg: SimulateConfig, rng: np.random.Generator) -> Corpus:
    """Draw the queries and their candidate documents for one simulation."""
    popularity, rank = zipf_popularity(cfg.n_queries, cfg.zipf_exponent, rng)
    vocab_p, _ = zipf_popularity(cfg.vocab_size, 1.0, rng)      # background token frequencies
    query_tokens = _query_terms(cfg.n_queries, vocab_p, rng)
    n_docs = cfg.n_queries * cfg.docs_per_query
    doc_query = np.repeat(np.arange(cfg.n_queries), cfg.docs_per_query)
    label = rng.choice(len(LABEL_PROBS), size=n_docs, p=LABEL_PROBS).astype(np.int8)
    media_type = draw_media_types(label, cfg, rng)
    title, abstract = _document_text(label, doc_query, query_tokens, vocab_p, rng)
    features = _dense_features(label, cfg.n_dense_features, rng)
    if cfg.media_type_features:   # the ranker sees what kind of result a document is, as a real ranker does
        features = np.hstack([features, np.eye(len(cfg.media_type_probs), dtype=np.float32)[media_type]])
    return Corpus(
        query_ids=np.arange(cfg.n_queries).astype(str).astype(object), query_tokens=query_tokens,
        popularity=popularity,
        bucket=frequency_buckets(rank), doc_ids=_md5_ids(title, abstract), doc_query=doc_query,
        title_tokens=title, abstract_tokens=abstract, features=features,
        label=label, media_type=media_type, docs_per_query=cfg.docs_per_query)
