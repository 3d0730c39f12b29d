"""A real-feature corpus (`data.simulate.corpus: letor`): queries, documents, dense features and true labels
from LETOR/SVMlight files, the way the unbiased-LTR papers simulate clicks on Yahoo! LTR and MSLR-WEB.

Each file of `letor_path` is read with its query file `<path>.query` when there is one, else by its `qid:`
tokens (wpultr.io.letor). The simulator's Corpus gives every query the same number of candidates, so:

* a query with fewer than `docs_per_query` documents is dropped (it cannot fill the candidate list);
* `n_queries` of the remaining queries are drawn uniformly without replacement (all of them when
  n_queries equals their number; more is a ConfigError naming how many there are);
* a kept query with more than `docs_per_query` documents keeps a uniform sample of `docs_per_query` of
  them, in file order; the rest are left out of the simulation (never shown, never annotated).

Nothing is padded or invented: every candidate is a real row with its real label. `n_dense_features` is
the width of the feature vectors: it must be at least the largest feature index in the files, and
columns beyond it are zero. Text tokens, media types, heights and query popularity are generated as
for the synthetic corpus (text from the true label), so whole-page user models and text rankers run.
The draws come from the corpus stream, so the corpus is a pure function of (config, seed, files).
Corpus.source records the files, every dropped query and why, and the source query and file lines of
every kept document; `simulate` writes it to truth.json under "corpus".
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..io.letor import LetorData, read_letor
from ..settings.simulate import KEY_PREFIX, SimulateConfig
from .corpus import Corpus, _document_text, _md5_ids, _query_terms, draw_media_types, frequency_buckets, zipf_popularity

QUERY_FILE_SUFFIX = ".query"
RULE = ("queries with fewer than docs_per_query documents dropped; n_queries of the rest drawn uniformly; "
        "each kept query's documents sampled uniformly down to docs_per_query, kept in file order")
TOO_SMALL = "fewer than docs_per_query documents"
NOT_DRAWN = "not among the n_queries drawn"


def _error(key: str, message: str) -> ConfigError:
    return ConfigError(f"{KEY_PREFIX}.{key}: {message}")


def letor_paths(cfg: SimulateConfig) -> list[Path]:
    """The configured LETOR files, in order."""
    paths = cfg.letor_path if isinstance(cfg.letor_path, list) else [cfg.letor_path]
    return [Path(p) for p in paths if p is not None]


def read_letor_files(cfg: SimulateConfig) -> list[LetorData]:
    """Each configured file read with `<path>.query` when it exists (else its qid: tokens), checked
    against n_dense_features."""
    out = []
    for path in letor_paths(cfg):
        if not path.is_file():
            raise _error("letor_path", f"must name existing LETOR files, got {str(path)!r} (no such file)")
        query_path = Path(str(path) + QUERY_FILE_SUFFIX)
        data = read_letor(path, query_path if query_path.is_file() else None)
        width = data.features.shape[1]
        if width > cfg.n_dense_features:
            raise _error("n_dense_features", f"must be >= {width}, the largest feature index in {path}, "
                                             f"got {cfg.n_dense_features}")
        out.append(data)
    return out


def _select_queries(sizes: np.ndarray, cfg: SimulateConfig, files: list[str],
                    rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of the kept queries (see the module docstring); ConfigError when too few qualify."""
    eligible = np.flatnonzero(sizes >= cfg.docs_per_query)
    if not len(eligible):
        raise _error("docs_per_query", f"must be <= {int(sizes.max())}, the largest query in {files}, "
                                       f"got {cfg.docs_per_query}")
    if len(eligible) < cfg.n_queries:
        raise _error("n_queries", f"must be <= {len(eligible)}, the queries with >= docs_per_query "
                                  f"({cfg.docs_per_query}) documents in {files}, got {cfg.n_queries}")
    return np.sort(rng.choice(eligible, size=cfg.n_queries, replace=False))


def build_letor_corpus(cfg: SimulateConfig, rng: np.random.Generator) -> Corpus:
    """The corpus of `cfg.letor_path`'s queries, documents, features and labels, with synthetic page parts."""
    datas = read_letor_files(cfg)
    files = [str(p) for p in letor_paths(cfg)]
    sizes = np.concatenate([d.group_sizes for d in datas])
    file_of_query = np.concatenate([np.full(d.n_queries, i) for i, d in enumerate(datas)])
    source_qid = np.concatenate([d.query_ids for d in datas])
    first_row = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    features_all = np.vstack([np.pad(d.features, ((0, 0), (0, cfg.n_dense_features - d.features.shape[1])))
                              for d in datas])
    labels_all = np.concatenate([d.labels for d in datas])
    lines_all = np.concatenate([d.line_numbers for d in datas])

    kept = _select_queries(sizes, cfg, files, rng)
    rows = np.concatenate([first_row[q] + np.sort(rng.choice(sizes[q], size=cfg.docs_per_query, replace=False))
                           for q in kept])
    label = labels_all[rows].astype(np.int8)
    features = features_all[rows].astype(np.float32)

    # the page and text parts, drawn as the synthetic corpus draws them (corpus.build_corpus)
    n_queries = cfg.n_queries
    popularity, rank = zipf_popularity(n_queries, cfg.zipf_exponent, rng)
    vocab_p, _ = zipf_popularity(cfg.vocab_size, 1.0, rng)
    query_tokens = _query_terms(n_queries, vocab_p, rng)
    doc_query = np.repeat(np.arange(n_queries), cfg.docs_per_query)
    media_type = draw_media_types(label, cfg, rng)
    title, abstract = _document_text(label, doc_query, query_tokens, vocab_p, rng)
    if cfg.media_type_features:
        features = np.hstack([features, np.eye(len(cfg.media_type_probs), dtype=np.float32)[media_type]])
    query_ids = np.arange(n_queries).astype(str).astype(object)
    return Corpus(query_ids=query_ids, query_tokens=query_tokens, popularity=popularity,
                  bucket=frequency_buckets(rank), doc_ids=_md5_ids(title, abstract), doc_query=doc_query,
                  title_tokens=title, abstract_tokens=abstract, features=features, label=label,
                  media_type=media_type, docs_per_query=cfg.docs_per_query,
                  source=_source(files, sizes, file_of_query, source_qid, kept, lines_all[rows], cfg))


def _source(files: list[str], sizes: np.ndarray, file_of_query: np.ndarray, source_qid: np.ndarray,
            kept: np.ndarray, kept_lines: np.ndarray, cfg: SimulateConfig) -> dict[str, Any]:
    """JSON-able record of what the corpus took from the files and what it left out, and why."""
    is_kept = np.zeros(len(sizes), dtype=bool)
    is_kept[kept] = True
    dropped = [{"file": int(file_of_query[q]), "query_id": str(source_qid[q]), "documents": int(sizes[q]),
                "reason": TOO_SMALL if sizes[q] < cfg.docs_per_query else NOT_DRAWN}
               for q in np.flatnonzero(~is_kept)]
    lines = kept_lines.reshape(len(kept), cfg.docs_per_query)
    return {
        "corpus": "letor", "files": files, "rule": RULE,
        "queries_in_files": int(len(sizes)), "documents_in_files": int(sizes.sum()),
        "queries_kept": int(len(kept)), "documents_kept": int(lines.size),
        "documents_left_out_of_kept_queries": int(sizes[kept].sum() - lines.size),
        "dropped_queries": dropped,
        "kept_queries": [{"query_id": str(i), "file": int(file_of_query[q]), "source_query_id": str(source_qid[q]),
                          "lines": lines[i].tolist()} for i, q in enumerate(kept)],
    }
