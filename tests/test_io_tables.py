"""Users' own logs: Parquet and CSV round trips, validation errors naming file, column and row,
the streaming partition writer, and the partitioned ingest on a real LocalCluster."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wpultr.io.tables import SessionPartitionWriter, ingest_tables, read_annotations_table, read_sessions_table
from wpultr.schema import (
    ABSTRACT_TOKENS,
    CLICK,
    FEATURES,
    QUERY_TOKENS,
    SESSION_ID,
    TITLE_TOKENS,
    TOKEN_TYPE,
    FeatureKind,
    PageFeature,
    SchemaError,
)

PAGE = (PageFeature("position", FeatureKind.ORDINAL), PageFeature("media_type", FeatureKind.CATEGORICAL),
        PageFeature("serp_height", FeatureKind.CONTINUOUS))
LIST_COLUMNS = (QUERY_TOKENS, TITLE_TOKENS, ABSTRACT_TOKENS, FEATURES)


def sessions_frame(n_sessions: int = 6, per_session: int = 3, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = n_sessions * per_session
    return pd.DataFrame({
        SESSION_ID: np.repeat(np.arange(100, 100 + n_sessions), per_session),
        "query_id": np.repeat(rng.integers(0, 50, n_sessions), per_session),
        "position": np.tile(np.arange(1, per_session + 1), n_sessions),
        CLICK: rng.integers(0, 2, n),
        "doc_id": [f"doc{i}" for i in range(n)],
        "media_type": rng.integers(0, 3, n),
        "serp_height": rng.gamma(2.0, 50.0, n).round(2),
        QUERY_TOKENS: [list(rng.integers(0, 99, 2)) for _ in range(n)],
        TITLE_TOKENS: [list(rng.integers(0, 99, 3)) for _ in range(n)],
        ABSTRACT_TOKENS: [list(rng.integers(0, 99, int(rng.integers(0, 4)))) for _ in range(n)],
        FEATURES: [list(rng.random(4).round(3)) for _ in range(n)],
        "dwell_time": rng.random(n),  # an extra behaviour column, kept
    })


def to_csv(df: pd.DataFrame, path) -> None:
    out = df.copy()
    for column in LIST_COLUMNS:
        out[column] = [" ".join(map(str, v)) for v in out[column]]
    out.to_csv(path, index=False)


def assert_same_table(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    for column in expected.columns:
        if column in LIST_COLUMNS:
            for a, b in zip(got[column], expected[column], strict=True):
                np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-6)
        elif column == "query_id":  # the exact decimal text of each id (the schema's contract)
            assert list(got[column]) == [str(v) for v in expected[column]]
        else:
            np.testing.assert_array_equal(got[column].to_numpy(), expected[column].to_numpy())


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_round_trip(tmp_path, fmt):
    df = sessions_frame()
    path = tmp_path / f"log.{fmt}"
    df.to_parquet(path) if fmt == "parquet" else to_csv(df, path)
    got = read_sessions_table(path, PAGE)
    assert_same_table(got, df)
    assert str(got["position"].dtype) == "int16" and str(got[CLICK].dtype) == "int8"


@pytest.mark.e2e
def test_ingest_tables_partitions_whole_sessions(tmp_path, dask_client):
    frames = [sessions_frame(seed=1), sessions_frame(seed=2).assign(**{SESSION_ID: lambda d: d[SESSION_ID] + 50})]
    frames[0].to_parquet(tmp_path / "a.parquet")
    to_csv(frames[1], tmp_path / "b.csv")
    summary = ingest_tables([tmp_path / "b.csv", tmp_path / "a.parquet"], tmp_path / "out", PAGE, dask_client,
                            partition_rows=7)
    parts = sorted((tmp_path / "out" / "sessions").glob("part-*.parquet"))
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in parts]
    assert max(sizes) <= 7 and summary.partitions == len(parts) and sum(sizes) == 36
    assert summary.to_dict()["sessions"] == 12 and summary.results == 36 and summary.quarantined == 0
    ids = [set(pd.read_parquet(p, columns=[SESSION_ID])[SESSION_ID]) for p in parts]
    assert sum(len(s) for s in ids) == 12  # no session split across partitions
    schema = pq.read_schema(parts[0])
    assert schema.field(TITLE_TOKENS).type == TOKEN_TYPE and schema.field("doc_id").type == "string"
    got = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    assert_same_table(got, pd.concat(frames, ignore_index=True)[got.columns.tolist()])


def greedy_partitions(ids: list[int], partition_rows: int) -> list[int]:
    """Reference sizes: each partition the longest prefix of the rest that ends at a session
    boundary within partition_rows rows, or exactly partition_rows rows of one long session."""
    sizes, start = [], 0
    while start < len(ids):
        end = min(start + partition_rows, len(ids))
        boundaries = [i for i in range(start + 1, end + 1) if i == len(ids) or ids[i] != ids[i - 1]]
        cut = boundaries[-1] if boundaries else end
        sizes.append(cut - start)
        start = cut
    return sizes


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=25), partition_rows=st.integers(1, 15),
       cuts=st.lists(st.integers(0, 60), max_size=8))
def test_partition_writer_streams_whole_sessions(tmp_path_factory, lengths, partition_rows, cuts):
    ids = np.repeat(np.arange(len(lengths)), lengths)
    table = pa.table({SESSION_ID: ids, "row": np.arange(len(ids))})
    directory = tmp_path_factory.mktemp("parts")
    writer = SessionPartitionWriter(directory, 3, partition_rows)
    bounds = [0, *sorted(c for c in cuts if c < len(ids)), len(ids)]
    for low, high in zip(bounds, bounds[1:], strict=False):  # the stream arrives in arbitrary pieces, some empty
        writer.write(table.slice(low, high - low))
        held = writer._held.num_rows if writer._held is not None else 0
        assert held <= max(lengths)  # never more than one session waits, whatever partition_rows
    writer.close()
    parts = sorted(directory.glob("*.parquet"))
    assert [p.name for p in parts] == [f"part-00003-{k:05d}.parquet" for k in range(len(parts))]
    assert [pq.ParquetFile(p).metadata.num_rows for p in parts] == greedy_partitions(list(ids), partition_rows)
    assert pa.concat_tables(pq.read_table(p) for p in parts).equals(table)
    assert writer.partitions == len(parts) and writer.rows == len(ids)
    assert not list(directory.glob(".*"))  # no temporary file left behind


def test_partition_writer_abort_drops_the_open_partition(tmp_path):
    writer = SessionPartitionWriter(tmp_path, 0, 4)
    writer.write(pa.table({SESSION_ID: [1, 1, 2, 2, 3, 4]}))
    writer.abort()
    assert [p.name for p in tmp_path.iterdir()] == ["part-00000-00000.parquet"]
    assert pq.read_table(tmp_path / "part-00000-00000.parquet")[SESSION_ID].to_pylist() == [1, 1, 2, 2]


def test_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "log.parquet"
    sessions_frame().drop(columns=[CLICK]).to_parquet(path)
    with pytest.raises(SchemaError, match=r"log\.parquet: missing column\(s\) \['click'\]"):
        read_sessions_table(path, PAGE)


def test_non_integer_click_names_column_and_row(tmp_path):
    df = sessions_frame()
    df[CLICK] = df[CLICK].astype(str)
    df.loc[4, CLICK] = "yes"
    path = tmp_path / "log.csv"
    to_csv(df, path)
    with pytest.raises(SchemaError, match=r"log\.csv: column 'click' row 4 is 'yes', expected an integer"):
        read_sessions_table(path, PAGE)


def test_undeclared_page_feature_names_column(tmp_path):
    df = sessions_frame()
    path = tmp_path / "log.parquet"
    df.drop(columns=["serp_height"]).to_parquet(path)
    with pytest.raises(SchemaError, match=r"missing column\(s\) \['serp_height'\]"):
        read_sessions_table(path, PAGE)
    df.loc[5, "serp_height"] = np.nan
    df.to_parquet(path)
    with pytest.raises(SchemaError, match="page feature 'serp_height' row 5 is empty"):
        read_sessions_table(path, PAGE)


def test_bad_token_cell_and_wrong_list_type(tmp_path):
    df = sessions_frame()
    csv = tmp_path / "log.csv"
    to_csv(df, csv)
    text = csv.read_text().splitlines()
    text[3] = text[3].replace(" ".join(map(str, df[TITLE_TOKENS][2])), "7 x 9")
    csv.write_text("\n".join(text) + "\n")
    with pytest.raises(SchemaError, match=r"column 'title_tokens' row 2 is '7 x 9', expected space-separated"):
        read_sessions_table(csv, PAGE)
    parquet = tmp_path / "log.parquet"
    df.assign(**{TITLE_TOKENS: [" ".join(map(str, v)) for v in df[TITLE_TOKENS]]}).to_parquet(parquet)
    with pytest.raises(SchemaError,
                       match="column 'title_tokens' has type (large_)?string, expected a list of integers"):
        read_sessions_table(parquet, PAGE)


def test_annotations_table(tmp_path):
    df = pd.DataFrame({"query_id": [1, 1, 2], "label": [0, 4, 2], "bucket": [0, 0, 9],
                       FEATURES: [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]})
    to_csv(df.assign(**{c: [[]] * 3 for c in (QUERY_TOKENS, TITLE_TOKENS, ABSTRACT_TOKENS)}), tmp_path / "a.csv")
    got = read_annotations_table(tmp_path / "a.csv")
    assert list(got["label"]) == [0, 4, 2] and str(got["label"].dtype) == "int8"
    df.loc[1, "label"] = 5
    df.to_parquet(tmp_path / "a.parquet")
    with pytest.raises(SchemaError, match="column 'label' row 1 is 5, expected <= 4"):
        read_annotations_table(tmp_path / "a.parquet")


def test_unknown_format_and_missing_file(tmp_path):
    (tmp_path / "log.json").write_text("{}")
    with pytest.raises(ValueError, match="unsupported table format"):
        read_sessions_table(tmp_path / "log.json", PAGE)
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        read_sessions_table(tmp_path / "nope.parquet", PAGE)


def _unreadable(tmp_path, case):
    """Files that are not the table their name says, each written under `tmp_path`."""
    good = tmp_path / "good.parquet"
    sessions_frame().to_parquet(good)
    writers = {
        "text named .parquet": ("log.parquet", lambda p: p.write_text("session_id,query_id\n1,2\n")),
        "truncated parquet": ("log.parquet", lambda p: p.write_bytes(good.read_bytes()[: good.stat().st_size // 2])),
        "empty parquet": ("log.parquet", lambda p: p.write_bytes(b"")),
        "empty csv": ("log.csv", lambda p: p.write_bytes(b"")),
        "csv.gz not gzip": ("log.csv.gz", lambda p: p.write_bytes(b"session_id,query_id\n1,2\n")),
        "binary csv": ("log.csv", lambda p: p.write_bytes(bytes(range(256)) * 4)),
        "unknown extension": ("log.json", lambda p: p.write_text("{}")),
        "a directory": ("dir.parquet", lambda p: p.mkdir()),
    }
    name, write = writers[case]
    path = tmp_path / name
    write(path)
    return path


@pytest.mark.parametrize("case", ["text named .parquet", "truncated parquet", "empty parquet", "empty csv",
                                  "csv.gz not gzip", "binary csv", "unknown extension", "a directory"])
def test_unreadable_file_is_one_schema_error_naming_it(tmp_path, case):
    path = _unreadable(tmp_path, case)
    with pytest.raises(SchemaError) as err:
        read_sessions_table(path, PAGE)
    message = str(err.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert ("expected" in message) or ("missing column" in message), message


@pytest.mark.parametrize("column, value, fragment", [
    ("position", 70000, "column 'position' row 4 is 70000, expected <= 32767"),
    ("position", 0, "column 'position' row 4 is 0, expected >= 1"),
    ("click", 2, "column 'click' row 4 is 2, expected <= 1"),
    ("session_id", 2 ** 64 - 1, "column 'session_id' row 4 is 18446744073709551615, expected <= 9223372036854775807"),
    ("query_id", "inf", "column 'query_id' row 4 is inf: expected a finite integral id"),
    ("query_id", "1e20", "column 'query_id' row 4 is 1e+20: a float id above 2^53 cannot be stored exactly"),
    ("query_id", "2.5", "column 'query_id' row 4 is 2.5: expected an integral id"),
])
def test_csv_values_are_range_checked_before_casting(tmp_path, column, value, fragment):
    df = sessions_frame().astype({column: object})
    df.loc[4, column] = value
    path = tmp_path / "log.csv"
    to_csv(df, path)
    with pytest.raises(SchemaError) as err:
        read_sessions_table(path, PAGE)
    assert str(err.value).startswith(f"{path}: {fragment}")


def test_parquet_float_query_ids(tmp_path):
    df = sessions_frame().astype({"query_id": "float64"})
    path = tmp_path / "log.parquet"
    df.to_parquet(path)
    assert list(read_sessions_table(path, PAGE)["query_id"]) == [str(int(v)) for v in df["query_id"]]
    df.loc[3, "query_id"] = 1e20
    df.to_parquet(path)
    with pytest.raises(SchemaError, match=r"column 'query_id' row 3 is 1e\+20: a float id above 2\^53 cannot "
                                          r"be stored exactly; write query ids as integers or strings"):
        read_sessions_table(path, PAGE)
    df.loc[3, "query_id"] = np.inf
    df.to_parquet(path)
    with pytest.raises(SchemaError, match="column 'query_id' row 3 is inf"):
        read_sessions_table(path, PAGE)


def test_query_ids_above_int64_are_kept_exactly(tmp_path):
    ids = [10000014169022957140, 18446744073709551615, 100000141690229571]  # 20 digits, uint64 max, 18 digits
    df = sessions_frame(n_sessions=3)
    df["query_id"] = np.repeat(np.array(ids, dtype=np.uint64), 3)
    df.to_parquet(tmp_path / "log.parquet")
    to_csv(df, tmp_path / "log.csv")
    expected = [str(i) for i in ids for _ in range(3)]
    for name in ("log.parquet", "log.csv"):
        got = read_sessions_table(tmp_path / name, PAGE)
        assert list(got["query_id"]) == expected, name
    strings = df.assign(query_id=np.repeat(["q-007", "0042", "abc"], 3))
    strings.to_parquet(tmp_path / "s.parquet")
    assert list(read_sessions_table(tmp_path / "s.parquet", PAGE)["query_id"]) == list(strings["query_id"])


def test_duplicate_session_position_names_both_rows(tmp_path):
    df = sessions_frame()
    df.loc[7, "position"] = 1  # session 102 now shows two results at position 1: rows 6 and 7
    path = tmp_path / "log.parquet"
    df.to_parquet(path)
    with pytest.raises(SchemaError, match=r"log\.parquet: rows 6 and 7 both hold session_id 102 position 1"):
        read_sessions_table(path, PAGE)
