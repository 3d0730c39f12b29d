"""Page-feature encoders: vocabularies, unknown levels, standardising, partition merging, save/load."""
import numpy as np
import pandas as pd
import pytest

from wpultr.features.encoders import (
    UNKNOWN_CODE,
    CategoricalEncoder,
    ContinuousScaler,
    PageFeatureEncoder,
    PreprocessConfig,
    one_hot,
)
from wpultr.schema import POSITION, SESSION_ID, FeatureKind, PageFeature, SchemaError

FEATURES = (PageFeature(POSITION, FeatureKind.ORDINAL), PageFeature("media_type", FeatureKind.CATEGORICAL),
            PageFeature("serp_height", FeatureKind.CONTINUOUS))


def sessions(n_sessions: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = n_sessions * 4
    return pd.DataFrame({SESSION_ID: np.repeat(np.arange(n_sessions), 4), POSITION: np.tile([1, 2, 3, 4], n_sessions),
                         "media_type": rng.choice([3, 11, 7], n), "serp_height": rng.normal(100, 20, n)})


def test_vocabulary_is_stable_and_unknown_levels_get_code_zero():
    a = CategoricalEncoder("m").fit(pd.DataFrame({"m": [11, 3, 7, 3]}))
    b = CategoricalEncoder("m").fit(pd.DataFrame({"m": [7, 7, 3, 11]}))
    assert a.vocabulary_ == b.vocabulary_ == [3, 7, 11]
    codes = a.transform(pd.DataFrame({"m": [3, 11, 99, 7]}))
    assert codes.tolist() == [1, 3, UNKNOWN_CODE, 2]
    assert a.embedding_.shape == (4, 8)
    np.testing.assert_array_equal(a.embedding_, b.embedding_)       # seeded
    text = CategoricalEncoder("m").fit(pd.DataFrame({"m": pd.Series(["video", "text", "image"], dtype="string")}))
    assert text.vocabulary_ == ["image", "text", "video"]
    assert text.transform(pd.DataFrame({"m": ["text", "audio"]})).tolist() == [2, UNKNOWN_CODE]


def test_continuous_scaler_and_merged_moments_match_whole():
    df = sessions(30, seed=0)
    whole = ContinuousScaler("serp_height").fit(df)
    z = whole.transform(df)
    assert z.mean() == pytest.approx(0, abs=1e-12) and z.std() == pytest.approx(1)
    parts = ContinuousScaler("serp_height")
    merged = parts.summarise(df.iloc[:37]).merge(parts.summarise(df.iloc[37:]))
    parts.fit_summary(merged)
    assert parts.mean_ == pytest.approx(whole.mean_) and parts.scale_ == pytest.approx(whole.scale_)
    constant = ContinuousScaler("h").fit(pd.DataFrame({"h": [2.0, 2.0]}))
    assert constant.transform(pd.DataFrame({"h": [2.0]})).tolist() == [0.0]


def test_page_encoder_fitted_by_partitions_equals_fit_on_whole(tmp_path):
    df = sessions(40, seed=1)
    whole = PageFeatureEncoder(FEATURES).fit(df)
    encoder = PageFeatureEncoder(FEATURES)
    summary = encoder.merge_summaries(encoder.summarise(df[df[SESSION_ID] < 13]),
                                      encoder.summarise(df[df[SESSION_ID] >= 13]))
    encoder.fit_summary(summary)
    pd.testing.assert_frame_equal(encoder.transform(df), whole.transform(df))
    out = whole.transform(df)
    by_position = out.groupby(df[POSITION])[POSITION].first().to_numpy()
    assert np.all(np.diff(by_position) < 0)
    assert out["media_type"].dtype == np.int64 and set(out["media_type"]) == {1, 2, 3}

    whole.save(tmp_path / "enc")
    loaded = PageFeatureEncoder.load(tmp_path / "enc")
    pd.testing.assert_frame_equal(loaded.transform(df), whole.transform(df))
    np.testing.assert_array_equal(loaded.encoders_["media_type"].embedding_, whole.encoders_["media_type"].embedding_)
    assert loaded.config == PreprocessConfig()


def test_errors_name_the_column_and_row(tmp_path):
    df = sessions(3, seed=0)
    df["serp_height"] = df["serp_height"].astype(object)
    df.loc[5, "serp_height"] = "tall"
    with pytest.raises(SchemaError, match=r"'serp_height' row 5 is 'tall'"):
        PageFeatureEncoder(FEATURES).fit(df)
    with pytest.raises(SchemaError, match="page feature 'media_type' is missing"):
        PageFeatureEncoder(FEATURES).fit(sessions(3, 0).drop(columns="media_type"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "page_features.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="is not 'wpultr.page_feature_encoder/1'"):
        PageFeatureEncoder.load(tmp_path / "bad")


def test_one_hot_has_a_column_per_present_level():
    block = one_hot(np.array([2, 5, 2, 9]))
    np.testing.assert_array_equal(block, [[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]])
