"""LETOR/SVMlight reader (wpultr.io.letor) and the simulator's real-feature corpus (data.simulate.corpus: letor)."""
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from wpultr.config import ConfigError, config_from_dict, load_config
from wpultr.errors import SchemaError
from wpultr.io.letor import read_letor
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.generate import simulation_engine
from wpultr.simulate.letor_corpus import NOT_DRAWN, TOO_SMALL

SAMPLE = Path(os.environ.get("WPULTR_LETOR_SAMPLE", Path(__file__).resolve().parents[1] / "data" / "letor-sample"))
needs_sample = pytest.mark.skipif(not (SAMPLE / "rank.train").is_file(), reason=f"no LETOR sample at {SAMPLE}")

TINY = """# a header comment line
2 qid:7 1:0.5 3:-1.25 # title of doc a

0 qid:7 2:3e-1
4 qid:9 1:1 3:2
"""


def _write(tmp_path: Path, text: str, query: str | None = None, name: str = "f.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    if query is not None:
        (tmp_path / f"{name}.query").write_text(query)
    return path


# ------------------------------------------------------------------------------------------- reader
def test_reader_gives_dense_rows_groups_from_qid_tokens_and_skips_comments_and_blank_lines(tmp_path):
    data = read_letor(_write(tmp_path, TINY))
    np.testing.assert_array_equal(data.features, np.array([[0.5, 0, -1.25], [0, 0.3, 0], [1, 0, 2]], np.float32))
    assert data.features.dtype == np.float32 and data.labels.dtype == np.int8
    assert data.labels.tolist() == [2, 0, 4]
    assert data.group_sizes.tolist() == [2, 1] and data.query_ids.tolist() == ["7", "9"]
    assert data.line_numbers.tolist() == [2, 4, 5] and data.offsets.tolist() == [0, 2, 3]
    wide = read_letor(tmp_path / "f.txt", n_features=5)
    assert wide.features.shape == (3, 5) and not wide.features[:, 3:].any()
    np.testing.assert_array_equal(wide.features[:, :3], data.features)


def test_a_query_file_gives_the_groups_and_numbers_the_queries(tmp_path):
    path = _write(tmp_path, "1 1:1\n0 2:1\n3 2:5 1:2\n", query="1\n2\n")      # indices in any order
    data = read_letor(path, tmp_path / "f.txt.query")
    assert data.group_sizes.tolist() == [1, 2] and data.query_ids.tolist() == ["0", "1"]
    assert data.features[2].tolist() == [2.0, 5.0]
    agreeing = read_letor(_write(tmp_path, TINY, query="2\n1\n", name="g.txt"), tmp_path / "g.txt.query")
    assert agreeing.query_ids.tolist() == ["7", "9"]


@pytest.mark.parametrize("text, query, n_features, message", [
    ("x qid:1 1:1\n", None, None, "f.txt:1: expected an integer relevance label 0-4 first, got 'x'"),
    ("1 qid:1 1:1\n5 qid:1 1:1\n", None, None, "f.txt:2: label 5 is outside 0-4"),
    ("-1 qid:1 1:1\n", None, None, "f.txt:1: label -1 is outside 0-4"),
    ("1 qid:1 1:1\n1 qid:1 1:1\n1 qid:1 2:a\n", None, None,
     "f.txt:3: expected fid:value with an integer feature index >= 1 and a finite number, got '2:a'"),
    ("1 qid:1 0:1\n", None, None, "f.txt:1: expected fid:value with an integer feature index >= 1"),
    ("1 qid:1 1:2:3\n", None, None, "f.txt:1: expected fid:value"),
    ("1 qid:1 1:1 7\n", None, None, "f.txt:1: expected fid:value with an integer feature index >= 1 and a finite "
                                    "number, got '7'"),
    ("1 qid:1 1:nan\n", None, None, "got '1:nan'"),
    ("1 qid:1 1:1\n1 qid:1 3:1\n", None, 2, "f.txt:2: feature index 3 is beyond n_features (2) in '3:1'"),
    ("1 qid:1 2:1 2:3\n", None, None, "f.txt:1: feature index 2 is given more than once"),
    ("1 qid:1 1:1\n1 qid:1 3:1 1:2 3:4\n", None, None, "f.txt:2: feature index 3 is given more than once"),
    ("1 1:1\n1 1:1\n", "3\n", None, "f.txt.query: query sizes add up to 3 documents but"),
    ("1 1:1\n1 1:1\n", "1\nx\n", None, "f.txt.query:2: expected a positive integer number of documents, got 'x'"),
    ("1 1:1\n1 1:1\n", "0\n2\n", None, "f.txt.query:1: expected a positive integer number of documents, got '0'"),
    ("1 1:1\n", "", None, "f.txt.query: no query sizes (empty file)"),
    ("", None, None, "f.txt: no documents (empty file)"),
    ("# only a comment\n\n", None, None, "f.txt: no documents (empty file)"),
    ("1 1:1\n", None, None, "f.txt: no query file given and no qid: tokens"),
    ("1 qid:1 1:1\n1 1:1\n", None, None, "f.txt:2: expected a qid: token on every line or on none"),
    ("1 qid:1 1:1\n1 qid:2 1:1\n1 qid:1 1:1\n", None, None,
     "f.txt:3: qid 1 already ended at line 1; the documents of a query must be consecutive lines"),
    ("1 qid:1 1:1\n1 qid:2 1:1\n", "2\n", None, "f.txt:2: qid 2 differs from qid 1 of line 1"),
    ("1 qid: 1:1\n", None, None, "f.txt:1: expected qid:ID with a non-empty ID"),
    ("1 qid:1 1:1\n1 qid:1 1:\xe9\n", None, None, "f.txt:2: expected fid:value"),
    ("1 qid:1 1:1\n1 qid:1 70000:1\n", None, None, "f.txt:2: feature index 70000 is above 65536, the most a "
                                                  "dense reader takes"),
    ("1 qid:1 1.5:1\n", None, None, "f.txt:1: expected fid:value with an integer feature index >= 1"),
])
def test_every_malformed_input_names_file_and_line(tmp_path, text, query, n_features, message):
    path = _write(tmp_path, text, query)
    with pytest.raises(SchemaError) as err:
        read_letor(path, tmp_path / "f.txt.query" if query is not None else None, n_features)
    assert message in str(err.value)
    assert str(err.value).startswith(str(tmp_path / "f.txt"))


def test_bytes_that_are_not_utf8_name_their_line(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"1 qid:1 1:1\n1 qid:1 1:\xff\n")
    with pytest.raises(SchemaError, match=r"f.txt:2: expected UTF-8 text \(invalid start byte at byte 10\)"):
        read_letor(path)


def _spot_rows(path: Path, n: int) -> tuple[list[int], list[dict[int, float]]]:
    """Labels and {fid: value} of the first n lines, parsed independently of the reader."""
    labels, rows = [], []
    with open(path) as f:
        for _, line in zip(range(n), f, strict=False):
            label, *pairs = line.split()
            labels.append(int(label))
            rows.append({int(p.split(":")[0]): float(p.split(":")[1]) for p in pairs})
    return labels, rows


@needs_sample
def test_the_real_sample_reads_as_its_readme_says():
    data = read_letor(SAMPLE / "rank.train", SAMPLE / "rank.train.query", n_features=300)
    assert data.features.shape == (3005, 300) and data.n_queries == 201
    assert np.bincount(data.labels, minlength=5).tolist() == [645, 1211, 858, 222, 69]
    assert data.group_sizes.tolist() == [int(x) for x in (SAMPLE / "rank.train.query").read_text().split()]
    labels, rows = _spot_rows(SAMPLE / "rank.train", 5)
    assert data.labels[:5].tolist() == labels
    for i, row in enumerate(rows):
        expected = np.zeros(300, np.float32)
        expected[np.array(list(row)) - 1] = list(row.values())
        np.testing.assert_array_equal(data.features[i], expected)
    test = read_letor(SAMPLE / "rank.test", SAMPLE / "rank.test.query")
    assert (test.n_docs, test.n_queries) == (768, 50)


# ---------------------------------------------------------------------------------------- simulator
SIZES = [3, 5, 7, 9, 6, 4, 8, 5, 10, 6, 5, 7, 2, 6]        # documents per query of the generated file
N_FILE_FEATURES = 6


@pytest.fixture(scope="module")
def letor_file(tmp_path_factory) -> Path:
    """A LETOR file with qid tokens, random sparse features and labels, no query file."""
    rng = np.random.default_rng(3)
    lines = []
    for q, size in enumerate(SIZES):
        for _ in range(size):
            fids = np.flatnonzero(rng.random(N_FILE_FEATURES) < 0.7) + 1
            pairs = " ".join(f"{f}:{rng.normal():.4f}" for f in fids)
            lines.append(f"{rng.integers(0, 5)} qid:{100 + q} {pairs} # doc")
    path = tmp_path_factory.mktemp("letor") / "train.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _cfg(path: Path, **changes) -> SimulateConfig:
    values = dict(corpus="letor", letor_path=str(path), n_queries=10, docs_per_query=5, results_per_page=4,
                  n_dense_features=8, n_sessions=400, n_annotated_queries=10, vocab_size=300)
    return SimulateConfig(**{**values, **changes})


def test_letor_corpus_shows_the_files_rows_with_their_labels(letor_file):
    cfg = _cfg(letor_file)
    logs = simulate(cfg, seed=5)
    data = read_letor(letor_file)
    row_of_line = {int(line): i for i, line in enumerate(data.line_numbers)}
    source = logs.truth["corpus"]
    kept_lines = np.array([q["lines"] for q in source["kept_queries"]]).reshape(-1)
    file_rows = np.array([row_of_line[line] for line in kept_lines])      # corpus row -> file row
    corpus = simulation_engine(cfg, 5).corpus
    corpus_row = {doc: i for i, doc in enumerate(corpus.doc_ids)}
    sessions = logs.sessions
    shown = file_rows[sessions["doc_id"].map(corpus_row).to_numpy()]
    features = np.stack(sessions["features"].to_numpy())
    np.testing.assert_array_equal(features[:, :N_FILE_FEATURES], data.features[shown])
    assert not features[:, N_FILE_FEATURES:].any()                       # n_dense_features 8 > 6: zero columns
    truth = logs.truth_sessions.merge(sessions[["session_id", "position", "doc_id"]])
    np.testing.assert_array_equal(truth["true_label"].to_numpy(), data.labels[shown])
    annotations = logs.annotations
    np.testing.assert_array_equal(annotations["label"].to_numpy(),
                                  data.labels[file_rows[annotations["doc_id"].map(corpus_row).to_numpy()]])
    for query in source["kept_queries"]:         # each corpus query is one file query, its lines in file order
        rows = [row_of_line[line] for line in query["lines"]]
        assert np.diff(rows).min() > 0
        assert {str(data.query_ids[np.searchsorted(data.offsets, r, side="right") - 1]) for r in rows} \
            == {query["source_query_id"]}


def test_letor_corpus_records_every_dropped_query_and_why(letor_file):
    truth = simulate(_cfg(letor_file), seed=1).truth
    assert "LETOR file" in truth["graph"]["mechanisms"]["relevance"]
    source = truth["corpus"]
    dropped = {q["query_id"]: q["reason"] for q in source["dropped_queries"]}
    too_small = {str(100 + q) for q, size in enumerate(SIZES) if size < 5}
    assert {q for q, why in dropped.items() if why == TOO_SMALL} == too_small
    assert sum(why == NOT_DRAWN for why in dropped.values()) == len(SIZES) - len(too_small) - 10
    kept = {q["source_query_id"] for q in source["kept_queries"]}
    assert len(kept) == 10 and not kept & set(dropped)
    sizes = {str(100 + q): size for q, size in enumerate(SIZES)}
    assert source["documents_left_out_of_kept_queries"] == sum(sizes[q] - 5 for q in kept)
    assert (source["queries_in_files"], source["documents_in_files"]) == (len(SIZES), sum(SIZES))


@pytest.mark.parametrize("changes, message", [
    ({"n_dense_features": 4}, "data.simulate.n_dense_features: must be >= 6, the largest feature index in"),
    ({"n_queries": 12}, "data.simulate.n_queries: must be <= 11, the queries with >= docs_per_query (5) documents"),
    ({"docs_per_query": 11, "n_annotated_queries": 10}, "data.simulate.docs_per_query: must be <= 10, the largest "
                                                        "query in"),
])
def test_settings_that_conflict_with_the_file_name_the_key(letor_file, changes, message):
    with pytest.raises(ConfigError) as err:
        simulate(_cfg(letor_file, **changes), seed=0)
    assert str(err.value).startswith(message)


def test_a_missing_file_and_a_malformed_file_are_user_errors(tmp_path):
    with pytest.raises(ConfigError, match="data.simulate.letor_path: must name existing LETOR files"):
        simulate(_cfg(tmp_path / "nope.txt"), seed=0)
    bad = _write(tmp_path, "1 qid:1 1:1\n9 qid:1 1:1\n")
    with pytest.raises(SchemaError, match=r"f.txt:2: label 9 is outside 0-4"):
        simulate(_cfg(bad), seed=0)


@pytest.mark.parametrize("values, message", [
    ({"corpus": "letor"}, "data.simulate.letor_path: must name the LETOR file(s) for corpus 'letor'"),
    ({"letor_path": "x.txt"}, "data.simulate.letor_path: must be null unless corpus is 'letor'"),
    ({"corpus": "letor", "letor_path": []}, "data.simulate.letor_path: must be null, a file path or a non-empty"),
    ({"corpus": "yahoo"}, "data.simulate.corpus: 'yahoo' is not allowed; allowed values: 'synthetic', 'letor'"),
])
def test_corpus_keys_are_checked_at_load(values, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"data": {"simulate": values}})
    assert str(err.value).startswith(message)


def test_letor_paths_in_a_config_file_are_relative_to_the_file(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    path = conf / "run.yaml"
    path.write_text(yaml.safe_dump({"data": {"simulate": {"corpus": "letor", "letor_path": "../data/a.txt"}}}))
    assert load_config(path).data.simulate.letor_path == str(tmp_path / "data" / "a.txt")
    path.write_text(yaml.safe_dump({"data": {"simulate": {"corpus": "letor", "letor_path": ["a.txt", "/x/b.txt"]}}}))
    assert load_config(path).data.simulate.letor_path == [str(conf / "a.txt"), "/x/b.txt"]


@needs_sample
def test_the_real_sample_as_a_corpus_keeps_every_query_that_fills_the_list():
    cfg = SimulateConfig(corpus="letor", letor_path=str(SAMPLE / "rank.train"), n_queries=178, docs_per_query=10,
                         n_dense_features=300, n_sessions=200, n_annotated_queries=20)
    logs = simulate(cfg, seed=0)
    source = logs.truth["corpus"]
    assert source["queries_kept"] == 178 and len(source["dropped_queries"]) == 201 - 178
    assert {q["reason"] for q in source["dropped_queries"]} == {TOO_SMALL}
    data = read_letor(SAMPLE / "rank.train", SAMPLE / "rank.train.query")
    row_of_line = {int(line): i for i, line in enumerate(data.line_numbers)}
    file_rows = np.array([row_of_line[line] for q in source["kept_queries"] for line in q["lines"]])
    corpus = simulation_engine(cfg, 0).corpus
    np.testing.assert_array_equal(corpus.features, data.features[file_rows])
    np.testing.assert_array_equal(corpus.label, data.labels[file_rows])


def test_several_files_make_one_corpus_each_with_its_own_query_source(letor_file, tmp_path):
    second = _write(tmp_path, "".join(f"{q % 5} {1 + q % 6}:{q + 0.5}\n" for q in range(30)), query="6\n" * 5,
                    name="second.txt")                        # groups from second.txt.query, no qid tokens
    cfg = _cfg(letor_file, letor_path=[str(letor_file), str(second)], n_queries=16)
    source = simulate(cfg, seed=2).truth["corpus"]
    assert source["files"] == [str(letor_file), str(second)]
    assert (source["queries_in_files"], source["documents_in_files"]) == (len(SIZES) + 5, sum(SIZES) + 30)
    from_second = [q for q in source["kept_queries"] if q["file"] == 1]
    assert len(from_second) == 5                              # all 5 six-document queries qualify; 11 + 5 = 16
    corpus = simulation_engine(cfg, 2).corpus
    for q in from_second:
        rows = int(q["query_id"]) * 5 + np.arange(5)
        np.testing.assert_array_equal(corpus.label[rows], [(line - 1) % 5 for line in q["lines"]])
        lines = np.array(q["lines"])
        np.testing.assert_array_equal(corpus.features[rows, (lines - 1) % 6], lines - 0.5)
        assert np.count_nonzero(corpus.features[rows]) == 5            # one feature per document, the rest 0
        assert all((line - 1) // 6 == int(q["source_query_id"]) for line in q["lines"])
