"""The Identifiability paper's fully synthetic corpus (`data.simulate.corpus: onehot`, §5.1 and Appendix C.1).

`n_documents` one-hot documents (10 000 in the paper) and `n_queries` queries (1 150) of `docs_per_query`
results (10), every one shown, each in the one position the design gives it. A document has no features but
its identity (its id, and a one-token title and abstract naming it); its grade 0-4 is drawn once and holds in
every query that shows it. The identifiability graph over positions is set by the design:

* position p shows documents of its own pool (documents p·P .. (p+1)·P − 1, P = n_documents / docs_per_query),
  each pool's documents dealt over the queries so that every one is shown;
* positions are cut into `position_blocks` = K components (the paper's Figure 5 designs for 10 positions,
  `PAPER_DESIGNS`; contiguous blocks otherwise) and, inside a component, each pair of neighbouring positions
  (p, p + 1) is joined by `BRIDGE_SHARE` · n_queries bridge documents (100 of the paper's 1 150 queries): a
  document of p's pool shown at p + 1 in another query. No document is ever shown in two components.

Queries are equally popular (each is issued alike), and the logging policy shows each query's documents in
their designed order (generate: a fixed order, no logging ranker). All draws come from the corpus stream.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..schema import TOKEN_TYPE
from ..settings.simulate import SimulateConfig
from .corpus import LABEL_PROBS, Corpus, draw_media_types, frequency_buckets
from .logging_policy import block_sizes

# The paper's designs for 10 positions (0-based), K = 1..4 components: Figure 5, as its published datasets have them.
PAPER_DESIGNS = {1: [range(0, 10)], 2: [range(0, 4), range(4, 10)], 3: [range(0, 4), range(4, 7), range(7, 10)],
                 4: [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]}
BRIDGE_SHARE = 100 / 1150          # bridge documents per joined pair of positions, as a share of the queries


def position_components(n_positions: int, k: int) -> list[list[int]]:
    """The positions (0-based) of each of the K components: the paper's design at 10 positions, else blocks."""
    if n_positions == 10 and k in PAPER_DESIGNS:
        return [list(r) for r in PAPER_DESIGNS[k]]
    starts = np.concatenate(([0], np.cumsum(block_sizes(n_positions, k))))
    return [list(range(a, b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]


def _deal(pool: int, n_queries: int, rng: np.random.Generator) -> np.ndarray:
    """(n_queries,) documents 0..pool-1, each at least once when pool <= n_queries, in random order."""
    first = rng.permutation(pool)[:n_queries]
    rest = rng.integers(0, pool, size=max(n_queries - pool, 0))
    return rng.permutation(np.concatenate([first, rest]))


def designed_lists(n_queries: int, n_positions: int, pool: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """(n_queries, n_positions) document of each query's positions, bridges inside components only."""
    lists = np.stack([p * pool + _deal(pool, n_queries, rng) for p in range(n_positions)], axis=1)
    bridges = max(1, round(BRIDGE_SHARE * n_queries))
    for component in position_components(n_positions, k):
        for p in component[:-1]:
            sources = rng.choice(n_queries, size=bridges, replace=False)    # a query showing the document at p
            targets = rng.choice(n_queries, size=bridges, replace=False)    # the query showing it at p + 1
            for source, target in zip(sources, targets, strict=True):
                doc = lists[source, p]
                if source != target and doc not in lists[target]:
                    lists[target, p + 1] = doc
    return lists


def _tokens(values: np.ndarray) -> pa.ListArray:
    """One token per row."""
    offsets = pa.array(np.arange(len(values) + 1, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values.astype(np.int32)), type=TOKEN_TYPE)


def build_onehot_corpus(cfg: SimulateConfig, rng: np.random.Generator) -> Corpus:
    """The designed corpus of `cfg` (see the module docstring); row q·docs_per_query + p is query q's position p."""
    n_queries, n_positions = cfg.n_queries, cfg.docs_per_query
    pool = cfg.n_documents // n_positions
    doc_label = rng.choice(len(LABEL_PROBS), size=pool * n_positions, p=LABEL_PROBS).astype(np.int8)
    lists = designed_lists(n_queries, n_positions, pool, cfg.position_blocks, rng)
    docs = lists.reshape(-1)
    label = doc_label[docs]
    rank = rng.permutation(n_queries)
    width = len(str(pool * n_positions - 1))
    return Corpus(
        query_ids=np.arange(n_queries).astype(str).astype(object), query_tokens=_tokens(np.arange(n_queries)),
        popularity=np.full(n_queries, 1.0 / n_queries), bucket=frequency_buckets(rank),
        doc_ids=np.array([f"d{d:0{width}d}" for d in docs.tolist()], dtype=object),
        doc_query=np.repeat(np.arange(n_queries), n_positions),
        title_tokens=_tokens(docs), abstract_tokens=_tokens(docs),
        features=np.zeros((len(docs), cfg.n_dense_features), dtype=np.float32), label=label,
        media_type=draw_media_types(label, cfg, rng), docs_per_query=n_positions,
        source={"corpus": "onehot", "documents": int(pool * n_positions), "documents_shown": int(len(np.unique(docs))),
                "components": position_components(n_positions, cfg.position_blocks)})
