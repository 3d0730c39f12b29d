"""The sessions and annotations contracts: validation errors name the column and the row."""
import pandas as pd
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
