"""Fixtures in the exact published schema of the Baidu-ULTR embedding datasets (Hager et al., SIGIR 2024), in both
stored forms, with the values they were made from kept for comparison.

Clicks: `clicks/part-{p}.parquet` (one record per session, a list per shown result: the hub's Parquet) and
`parts/part-{p}_split-0.feather` (one row per shown result, `query_no` grouping a session's rows); annotations:
`annotations.parquet` (one record per query) and `annotations.feather` (one row per document). Every column has
its published type: ids and md5s strings, token ids int32 lists, `n` int32, the embedding n x 768 float16, click,
position, media type, SERP height, slip-offs int32, displayed time and the LTR scores float32, lengths int32.

The world: each query has `docs_per_query` documents of grade 0-4 (skewed low); a document's embedding is noise plus
its grade along a fixed direction, so a ranker can learn the grade from it. A logging ranker orders a query's
documents by grade plus noise; a user examines position k with chance 1 / k (times a media type's factor) and clicks
an examined document with chance 0.05 + 0.9 (2^g - 1) / 15. Part 0 is the held-out part, as in the study.

    python tests/baidu_embeddings_fixture.py OUT --sessions 50000 [--queries 2000] [--forms feather,parquet]
"""
from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

WIDTH = 768
LTR = ("bm25", "bm25_title", "bm25_abstract", "tf_idf", "tf", "idf", "ql_jelinek_mercer_short",
       "ql_jelinek_mercer_long", "ql_dirichlet", "document_length", "title_length", "abstract_length")
INT_LTR = ("document_length", "title_length", "abstract_length")
MEDIA_FACTOR = np.array([1.0, 0.8, 0.9, 1.0, 0.6])   # examination factor of media types 0..4


def _md5(texts: list[str]) -> list[str]:
    return [hashlib.md5(t.encode()).hexdigest() for t in texts]


@dataclass
class Corpus:
    """The queries and their documents: ids, tokens, grades, embeddings (float16) and LTR scores."""

    query_id: list[str]
    query_md5: list[str]
    query_tokens: list[np.ndarray]
    frequency_bucket: np.ndarray
    grade: np.ndarray                 # queries x docs
    text_md5: np.ndarray              # queries x docs (object)
    url_md5: np.ndarray
    title: list[list[np.ndarray]]
    abstract: list[list[np.ndarray]]
    embedding: np.ndarray             # queries x docs x width, float16
    ltr: dict[str, np.ndarray]        # name -> queries x docs (float32; lengths int32)


def make_corpus(n_queries: int, docs_per_query: int, seed: int = 0, width: int = WIDTH) -> Corpus:
    rng = np.random.default_rng(seed)
    ids = [f"{10**19 + int(v):020d}" for v in rng.choice(10**18, size=n_queries, replace=False)]
    tokens = [rng.integers(10, 5000, size=rng.integers(1, 6)).astype(np.int32) for _ in range(n_queries)]
    grade = rng.choice(5, size=(n_queries, docs_per_query), p=[0.45, 0.25, 0.15, 0.1, 0.05])
    keys = [f"{q}/{d}" for q in range(n_queries) for d in range(docs_per_query)]
    text = np.array(_md5(["text " + k for k in keys]), dtype=object).reshape(n_queries, docs_per_query)
    url = np.array(_md5(["url " + k for k in keys]), dtype=object).reshape(n_queries, docs_per_query)
    title = [[rng.integers(10, 5000, size=rng.integers(2, 9)).astype(np.int32) for _ in range(docs_per_query)]
             for _ in range(n_queries)]
    abstract = [[rng.integers(10, 5000, size=rng.integers(5, 30)).astype(np.int32) for _ in range(docs_per_query)]
                for _ in range(n_queries)]
    direction = rng.choice([-1.0, 1.0], size=width) / np.sqrt(width) * 0.6   # a grade: 0.6 noise sds
    noise = rng.normal(0.0, 1.0, size=(n_queries, docs_per_query, width))
    embedding = (noise + grade[..., None] * direction).astype(np.float16)
    ltr = {}
    for i, name in enumerate(LTR):
        if name in INT_LTR:
            ltr[name] = rng.integers(5, 400, size=grade.shape).astype(np.int32)
        else:
            ltr[name] = (grade * (0.5 + i / 10) + rng.normal(0, 1, size=grade.shape)).astype(np.float32)
    buckets = np.minimum(np.arange(n_queries) * 10 // max(n_queries, 1), 9).astype(np.int32)
    return Corpus(ids, _md5([" ".join(map(str, t)) for t in tokens]), tokens, buckets, grade, text, url, title,
                  abstract, embedding, ltr)


@dataclass
class Part:
    """One part's sessions as the generator made them: per shown result (flat order), what was written."""

    query: np.ndarray        # query index per session
    n: np.ndarray            # results per session
    doc: np.ndarray          # per row: document index within its query
    row_query: np.ndarray    # per row: query index
    session: np.ndarray      # per row: session ordinal within the part (= query_no)
    position: np.ndarray
    click: np.ndarray
    media_type: np.ndarray
    serp_height: np.ndarray
    displayed_time: np.ndarray
    slipoff: np.ndarray
    extra: dict = field(default_factory=dict)


def make_part(corpus: Corpus, n_sessions: int, seed: int, results_per_page: int = 10) -> Part:
    rng = np.random.default_rng(seed)
    n_queries, docs = corpus.grade.shape
    popularity = 1.0 / np.arange(1, n_queries + 1) ** 0.8
    query = rng.choice(n_queries, size=n_sessions, p=popularity / popularity.sum())
    n = rng.integers(max(2, results_per_page - 3), results_per_page + 1, size=n_sessions).astype(np.int32)
    score = corpus.grade[query] + rng.normal(0.0, 1.0, size=(n_sessions, docs))
    order = np.argsort(-score, axis=1)
    keep = np.arange(docs)[None, :] < n[:, None]
    doc = order[keep]
    session = np.repeat(np.arange(n_sessions), n)
    position = (np.arange(docs)[None, :].repeat(n_sessions, 0)[keep] + 1).astype(np.int32)
    row_query = query[session]
    grade = corpus.grade[row_query, doc]
    media = rng.choice(5, size=len(doc), p=[0.6, 0.15, 0.1, 0.1, 0.05]).astype(np.int32)
    examine = np.minimum(1.0, MEDIA_FACTOR[media] / position)
    attract = 0.05 + 0.9 * (2.0 ** grade - 1) / 15
    click = (rng.random(len(doc)) < examine * attract).astype(np.int32)
    height = (rng.normal(150 + 60 * media, 20)).clip(20).astype(np.int32)
    shown = rng.exponential(3.0, size=len(doc)).astype(np.float32)
    slipoff = np.where(click == 1, rng.poisson(1.0, size=len(doc)), 0).astype(np.int32)
    return Part(query, n, doc, row_query, session, position, click, media, height, shown, slipoff)


def _lists(values: np.ndarray, n: np.ndarray, value_type: pa.DataType) -> pa.Array:
    offsets = np.r_[0, np.cumsum(n)].astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type))


def _token_lists(lists: list[np.ndarray]) -> pa.Array:
    return _lists(np.concatenate(lists) if lists else np.zeros(0, np.int32),
                  np.array([len(x) for x in lists]), pa.int32())


def _embedding_rows(rows: np.ndarray) -> pa.Array:
    """One list<float16> of WIDTH values per row."""
    m, width = rows.shape
    return pa.ListArray.from_arrays(pa.array(np.arange(0, (m + 1) * width, width, dtype=np.int32)),
                                    pa.array(rows.reshape(-1), type=pa.float16()))


def _result_columns(corpus: Corpus, q: np.ndarray, d: np.ndarray) -> dict[str, pa.Array]:
    """The per-result columns of rows (query q, document d), one value per row, in their published types."""
    cols = {
        "url_md5": pa.array(corpus.url_md5[q, d].tolist(), pa.string()),
        "text_md5": pa.array(corpus.text_md5[q, d].tolist(), pa.string()),
        "title": _token_lists([corpus.title[a][b] for a, b in zip(q, d, strict=True)]),
        "abstract": _token_lists([corpus.abstract[a][b] for a, b in zip(q, d, strict=True)]),
        "query_document_embedding": _embedding_rows(corpus.embedding[q, d]),
    }
    for name in LTR:
        cols[name] = pa.array(corpus.ltr[name][q, d])
    return cols


def _per_session(flat: dict[str, pa.Array], n: np.ndarray) -> dict[str, pa.Array]:
    offsets = pa.array(np.r_[0, np.cumsum(n)].astype(np.int32))
    return {k: pa.ListArray.from_arrays(offsets, v) for k, v in flat.items()}


def click_tables(corpus: Corpus, part: Part) -> tuple[pa.Table, pa.Table]:
    """(per-session table, flat table) of one part's clicks."""
    q, n = part.query, part.n
    rows = _result_columns(corpus, part.row_query, part.doc)
    rows.update({
        "click": pa.array(part.click), "position": pa.array(part.position), "media_type": pa.array(part.media_type),
        "displayed_time": pa.array(part.displayed_time), "serp_height": pa.array(part.serp_height),
        "slipoff_count_after_click": pa.array(part.slipoff)})
    session = {
        "query_id": pa.array([corpus.query_id[i] for i in q], pa.string()),
        "query_md5": pa.array([corpus.query_md5[i] for i in q], pa.string()),
        "query": _token_lists([corpus.query_tokens[i] for i in q]),
        "query_length": pa.array([len(corpus.query_tokens[i]) for i in q], pa.int32()),
        "n": pa.array(n, pa.int32()),
    }
    per_session = pa.table({**session, **_per_session(rows, n)})
    repeat = pa.array(part.session)
    flat = {"query_no": pa.array(part.session.astype(np.int64))}
    flat.update({k: v.take(repeat) for k, v in session.items() if k != "n"})
    flat.update(rows)
    return per_session, pa.table(flat)


def annotation_tables(corpus: Corpus, n_queries: int) -> tuple[pa.Table, pa.Table]:
    """(per-query table, flat table) of the annotations of the first `n_queries` queries: every document labelled."""
    docs = corpus.grade.shape[1]
    q = np.repeat(np.arange(n_queries), docs)
    d = np.tile(np.arange(docs), n_queries)
    n = np.full(n_queries, docs, dtype=np.int32)
    rows = _result_columns(corpus, q, d)
    del rows["url_md5"]
    rows["label"] = pa.array(corpus.grade[q, d].astype(np.int32))
    session = {
        "query_id": pa.array(corpus.query_id[:n_queries], pa.string()),
        "query_md5": pa.array(corpus.query_md5[:n_queries], pa.string()),
        "query": _token_lists(corpus.query_tokens[:n_queries]),
        "query_length": pa.array([len(t) for t in corpus.query_tokens[:n_queries]], pa.int32()),
        "frequency_bucket": pa.array(corpus.frequency_bucket[:n_queries], pa.int32()),
        "n": pa.array(n, pa.int32()),
    }
    per_query = pa.table({**session, **_per_session(rows, n)})
    repeat = pa.array(q)
    flat = {k: v.take(repeat) for k, v in session.items() if k != "n"}
    flat.update(rows)
    return per_query, pa.table(flat)


def write_dataset(out: str | Path, n_sessions: int, n_queries: int = 60, docs_per_query: int = 20,
                  n_annotated: int = 30, parts: int = 4, seed: int = 0, forms: tuple[str, ...] = ("feather", "parquet")
                  ) -> tuple[Corpus, list[Part]]:
    """Write `parts` click parts (part 0 the held-out one) and the annotations in `forms`; (corpus, parts)."""
    out = Path(out)
    corpus = make_corpus(n_queries, docs_per_query, seed)
    made = []
    sizes = np.full(parts, n_sessions // parts)
    sizes[: n_sessions % parts] += 1
    for p in range(parts):
        part = make_part(corpus, int(sizes[p]), seed * 1000 + p + 1)
        per_session, flat = click_tables(corpus, part)
        if "parquet" in forms:
            (out / "clicks").mkdir(parents=True, exist_ok=True)
            pq.write_table(per_session, out / "clicks" / f"part-{p}.parquet", row_group_size=4096)
        if "feather" in forms:
            (out / "parts").mkdir(parents=True, exist_ok=True)
            feather.write_feather(flat, out / "parts" / f"part-{p}_split-0.feather")
        made.append(part)
        del per_session, flat
    per_query, flat = annotation_tables(corpus, min(n_annotated, n_queries))
    out.mkdir(parents=True, exist_ok=True)
    if "parquet" in forms:
        pq.write_table(per_query, out / "annotations.parquet")
    if "feather" in forms:
        feather.write_feather(flat, out / "annotations.feather")
    return corpus, made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--docs-per-query", type=int, default=20)
    parser.add_argument("--annotated", type=int, default=30)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--forms", default="feather,parquet")
    args = parser.parse_args()
    write_dataset(args.out, args.sessions, args.queries, args.docs_per_query, args.annotated, args.parts, args.seed,
                  tuple(args.forms.split(",")))
    print(f"wrote {args.sessions} sessions in {args.parts} parts and {args.annotated} annotated queries to {args.out}")


if __name__ == "__main__":
    main()
