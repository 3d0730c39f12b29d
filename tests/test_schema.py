"""The sessions and annotations contracts: validation errors name the column and the row."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wpultr import schema
from wpultr.schema import FeatureKind, PageFeature, SchemaError, validate_annotations, validate_sessions

FEATURES = (PageFeature("position", FeatureKind.ORDINAL), PageFeature("media_type", FeatureKind.CATEGORICAL),
            PageFeature("serp_height", FeatureKind.CONTINUOUS))


def sessions(**changes):
    df = pd.DataFrame({"session_id": [1, 1, 2], "query_id": [7, 7, 8], "position": [1, 2, 1],
                       "click": [0, 1, 0], "media_type": [0, 2, 1], "serp_height": [80.0, 120.0, 90.0],
                       "features": [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]})
    for column, value in changes.items():
        df[column] = value
    return df


def test_valid_table_passes_and_coerces():
    validate_sessions(sessions(), FEATURES)
    out = schema.coerce_sessions(sessions(), FEATURES)
    assert str(out["position"].dtype) == "int16" and str(out["click"].dtype) == "int8"


@pytest.mark.parametrize("change, fragment", [
    ({"click": [0, 2, 0]}, "column 'click' row 1 is 2, expected <= 1"),
    ({"click": ["0", "x", "1"]}, "column 'click' row 1 is 'x', expected an integer"),
    ({"position": [1, 0, 1]}, "column 'position' row 1 is 0, expected >= 1"),
    ({"serp_height": ["a", "b", "c"]}, "page feature 'serp_height' is declared continuous"),
    ({"serp_height": [1.0, None, 2.0]}, "page feature 'serp_height' row 1 is empty"),
    ({"features": [[0.1, 0.2], [0.3], [0.5, 0.6]]}, "column 'features' row 1 has 1 values"),
])
def test_errors_name_column_and_row(change, fragment):
    with pytest.raises(SchemaError) as err:
        validate_sessions(sessions(**change), FEATURES)
    assert fragment in str(err.value)


def test_missing_declared_feature_and_missing_text():
    with pytest.raises(SchemaError, match="missing column"):
        validate_sessions(sessions().drop(columns=["media_type"]), FEATURES)
    with pytest.raises(SchemaError, match="token-id columns"):
        validate_sessions(sessions().drop(columns=["features"]), FEATURES)


def test_annotations_label_and_bucket_ranges():
    df = pd.DataFrame({"query_id": [1, 1], "label": [0, 5], "bucket": [0, 9], "features": [[0.0], [1.0]]})
    with pytest.raises(SchemaError, match="column 'label' row 1 is 5, expected <= 4"):
        validate_annotations(df)


def test_baidu_layout_constants():
    assert schema.BAIDU_N_RESULT_FIELDS == 32
    assert schema.BAIDU_RESULT_FIELDS[0] == "position" and schema.BAIDU_RESULT_FIELDS[5] == "click"
    named = [n for n in schema.BAIDU_RESULT_FIELDS if n]
    assert len(named) == len(set(named))
    assert {f.name for f in schema.BAIDU_PAGE_FEATURES} <= set(schema.baidu_sessions_arrow_schema().names)


# --- own tables: ranges checked before casting, exact query ids, one result per (session, position) ---------
@pytest.mark.parametrize("change, fragment", [
    ({"position": [1, 70000, 1]}, "column 'position' row 1 is 70000, expected <= 32767"),
    ({"session_id": [1.0, 2.0 ** 60, 2.0]}, "column 'session_id' row 1 is 1.152921504606847e+18, a float above 2^53"),
    ({"session_id": ["1", "99999999999999999999", "2"]},
     "row 1 is '99999999999999999999', expected <= 9223372036854775807"),
    ({"click": [0.0, 0.5, 1.0]}, "column 'click' row 1 is 0.5, expected an integer"),
    ({"query_id": [7.0, 1e20, 8.0]}, "column 'query_id' row 1 is 1e+20: a float id above 2^53 cannot be stored "
                                     "exactly; write query ids as integers or strings"),
    ({"query_id": [7.0, float("nan"), 8.0]}, "column 'query_id' row 1 is empty"),
    ({"query_id": [7.0, float("-inf"), 8.0]}, "column 'query_id' row 1 is -inf: expected a finite integral id"),
    ({"query_id": ["7", " ", "8"]}, "column 'query_id' row 1 is ' ': expected a non-empty id"),
    ({"query_id": [True, False, True]}, "column 'query_id' row 0 is True: expected an integer or string id"),
    ({"position": [1, 1, 1]}, "rows 0 and 1 both hold session_id 1 position 1"),
])
def test_own_table_values_rejected_before_casting(change, fragment):
    for check in (validate_sessions, schema.coerce_sessions):
        with pytest.raises(SchemaError) as err:
            check(sessions(**change), FEATURES)
        assert fragment in str(err.value)


@pytest.mark.parametrize("ids, expected", [
    ([7, 7, 8], ["7", "7", "8"]),
    ([7.0, 7.0, 2.0 ** 53 - 1], ["7", "7", "9007199254740991"]),
    (["q7", "q7", "0008"], ["q7", "q7", "0008"]),                            # strings kept as written
    (np.array([2 ** 64 - 1] * 2 + [1], dtype=np.uint64), ["18446744073709551615"] * 2 + ["1"]),
])
def test_query_ids_become_exact_text(ids, expected):
    out = schema.coerce_sessions(sessions(query_id=ids), FEATURES)
    assert list(out["query_id"]) == expected
    annotations = pd.DataFrame({"query_id": ids, "label": [0, 1, 2], "bucket": [0, 1, 9], "features": [[0.0]] * 3})
    assert list(schema.coerce_annotations(annotations)["query_id"]) == expected


def test_coerce_casts_only_checked_values():
    out = schema.coerce_sessions(sessions(click=[False, True, False], position=[1.0, 2.0, 1.0]), FEATURES)
    assert list(out["click"]) == [0, 1, 0] and str(out["click"].dtype) == "int8"
    assert list(out["position"]) == [1, 2, 1] and str(out["position"].dtype) == "int16"
    with pytest.raises(SchemaError, match="column 'bucket' row 0 is 300, expected <= 9"):
        schema.coerce_annotations(pd.DataFrame({"query_id": [1], "label": [0], "bucket": [300], "features": [[0.0]]}))


def test_query_ids_are_exact_text_in_both_arrow_tables_and_the_query_key_adds_the_tokens():
    for fields in (schema.SESSION_CORE_FIELDS, schema.ANNOTATION_CORE_FIELDS):
        assert {f.name: f.type for f in fields}["query_id"] == schema.QUERY_ID_TYPE == pa.string()
    assert schema.baidu_sessions_arrow_schema().field(schema.QUERY_REFORMULATION).type == pa.string()
    df = pd.DataFrame({"query_id": ["10000014169022957140", "10000014169022957140", "7", "7"],
                       "query_tokens": [np.array([1, 2]), np.array([3]), np.array([1, 2]), None]})
    assert list(schema.query_key(df)) == ["10000014169022957140\t1 2", "10000014169022957140\t3", "7\t1 2", "7\t"]
    assert list(schema.query_key(df[["query_id"]])) == ["10000014169022957140"] * 2 + ["7"] * 2
