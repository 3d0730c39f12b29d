"""The whole-page click simulator, its Baidu-layout writer and the bundled sample.

Click rates are checked against probabilities recomputed here from the documented formulas (not read
from the generator), with a binomial 4-sigma band; the true graph is checked against what the
generator does by switching mechanisms off and watching the dependence vanish.
"""
import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wpultr.config import ConfigError
from wpultr.io.baidu_writer import write_baidu_annotations, write_baidu_sessions
from wpultr.schema import (
    BAIDU_ANNOTATION_FIELDS,
    BAIDU_N_RESULT_FIELDS,
    BAIDU_QUERY_FIELDS,
    BAIDU_RESULT_FIELDS,
    BAIDU_TOKEN_SEP,
    N_BUCKETS,
    SchemaError,
)
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import USER_MODELS, simulate
from wpultr.simulate.bundled_sample import KINDS, MANIFEST, write_sample
from wpultr.simulate.generate import simulation_engine

REPO = Path(__file__).resolve().parents[1]
FIELD = {name: i for i, name in enumerate(BAIDU_RESULT_FIELDS) if name is not None}
SMALL = dict(n_queries=60, docs_per_query=15, n_annotated_queries=12, vocab_size=500, n_dense_features=8)


def run(n_sessions=3000, seed=0, **changes):
    return simulate(SimulateConfig(**{**SMALL, "n_sessions": n_sessions, **changes}), seed=seed)


def joined(logs):
    """Sessions with the truth columns beside them (same row order)."""
    truth = logs.truth_sessions
    assert (truth["session_id"].values == logs.sessions["session_id"].values).all()
    return logs.sessions.assign(true_label=truth["true_label"].values, click_prob=truth["click_prob"].values,
                                examination_prob=truth["examination_prob"].values)


def assert_rates_match(df, by, prob="click_prob", sigmas=4.0):
    """Observed clicks per group within `sigmas` binomial standard deviations of the expected count."""
    for key, group in df.groupby(by):
        p = group[prob].to_numpy()
        expected, sd = p.sum(), np.sqrt((p * (1 - p)).sum())
        assert abs(group["click"].sum() - expected) <= sigmas * sd + 1e-9, (by, key, group["click"].sum(), expected)


def relevance_prob(label, noise):
    return noise + (1 - noise) * (2.0 ** label - 1) / 15


# ---------------------------------------------------------------------------------------------
def test_same_seed_gives_identical_tables_and_another_seed_does_not():
    a, b, c = run(400, seed=7, n_context_factors=2), run(400, seed=7, n_context_factors=2), \
        run(400, seed=8, n_context_factors=2)
    for name in ("session_table", "truth_session_table", "annotation_table", "query_table"):
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.truth == b.truth
    assert not a.session_table.equals(c.session_table)
    json.dumps(a.truth)  # JSON-able


def test_sessions_follow_the_contract():
    logs = run(300, n_context_factors=2)
    s = logs.sessions
    assert list(s.columns[:4]) == ["session_id", "query_id", "position", "click"]
    assert {"doc_id", "query_tokens", "title_tokens", "abstract_tokens", "features", "media_type", "serp_height",
            "serp_max_show_height", "context_0", "context_1"} <= set(s.columns)
    assert s.groupby("session_id")["position"].apply(list).map(lambda p: p == list(range(1, 11))).all()
    assert (s["serp_max_show_height"] <= s["serp_height"]).all() and (s["serp_max_show_height"] >= 0).all()
    tokens = np.concatenate([np.concatenate(s[c].to_list()) for c in ("query_tokens", "title_tokens")])
    assert tokens.dtype == np.int32 and tokens.min() >= 0 and tokens.max() < SMALL["vocab_size"]
    assert {len(f) for f in s["features"]} == {SMALL["n_dense_features"]}
    a = logs.annotations
    assert a.groupby("query_id").size().eq(SMALL["docs_per_query"]).all()
    assert a["query_id"].nunique() == SMALL["n_annotated_queries"]
    shown = joined(logs)
    assert set(shown["true_label"]) <= set(range(5))
    # the logging ranker sorts by noisy relevance: higher grades sit higher on the page
    assert shown.groupby("true_label")["position"].mean().is_monotonic_decreasing


def test_pbm_click_rates_match_the_models_probabilities():
    logs = run(6000, user_model="pbm", user_model_params={"position_power": 0.8, "click_noise": 0.05})
    df = joined(logs)
    expected = df["position"] ** -0.8 * relevance_prob(df["true_label"], 0.05)
    np.testing.assert_allclose(df["click_prob"], expected)
    assert_rates_match(df, "position")
    assert_rates_match(df, "media_type")
    assert_rates_match(df, "true_label")


def test_whole_page_click_rates_match_the_models_probabilities():
    logs = run(6000)
    params = logs.truth["user_model"]["params"]
    df = joined(logs)
    m = df["media_type"].to_numpy()
    shown = np.minimum(1, df["serp_max_show_height"] / params["readable_height"])
    w = params["visibility_weight"]
    exam = (df["position"] ** -params["position_power"] * (1 - w + w * shown)
            * np.asarray(params["media_attention"])[m])
    r = relevance_prob(df["true_label"], params["click_noise"])
    expected = exam * (r + (1 - r) * np.asarray(params["media_attractiveness"])[m])
    np.testing.assert_allclose(df["click_prob"], expected)
    np.testing.assert_allclose(df["examination_prob"], exam)
    assert_rates_match(df, "position")
    assert_rates_match(df, "media_type")
    parents = logs.truth["graph"]["parents"]
    assert {"position", "media_type"} <= set(parents["click"]) and "relevance" in parents["position"]


def _position_effect(df):
    """Largest z-score of a top-vs-bottom click-rate gap within a (grade, media type) cell."""
    worst = 0.0
    for _, cell in df.groupby(["true_label", "media_type"]):
        top, bottom = cell[cell["position"] <= 3]["click"], cell[cell["position"] >= 6]["click"]
        if min(len(top), len(bottom)) < 30:
            continue
        pooled = (top.sum() + bottom.sum()) / (len(top) + len(bottom))
        sd = np.sqrt(pooled * (1 - pooled) * (1 / len(top) + 1 / len(bottom)))
        if sd > 0:
            worst = max(worst, abs(top.mean() - bottom.mean()) / sd)
    return worst


def test_graph_edges_follow_the_generator_position_bias():
    off = run(5000, user_model_params={"position_power": 0.0, "visibility_weight": 0.0})
    assert {"position", "serp_max_show_height"}.isdisjoint(off.truth["graph"]["parents"]["click"])
    assert _position_effect(joined(off)) < 4.0        # given relevance (and media type) position no longer matters
    on = run(5000)
    assert "position" in on.truth["graph"]["parents"]["click"]
    assert _position_effect(joined(on)) > 4.0


def _video_ahead_z(logs):
    """z-score of how often a video is shown above a plain result of the same grade (one pair per session,
    picked by doc id). Without a media boost the logging ranker orders same-grade results by fresh
    per-session noise, so the video is ahead with probability exactly 1/2, independently across sessions."""
    df = joined(logs)[["session_id", "true_label", "media_type", "position", "doc_id"]]
    pairs = df[df["media_type"] == 2].merge(df[df["media_type"] == 0], on=["session_id", "true_label"])
    pairs = pairs.sort_values(["doc_id_x", "doc_id_y"]).drop_duplicates("session_id")  # chosen blind to position
    ahead = (pairs["position_x"] < pairs["position_y"]).sum()
    return (ahead - len(pairs) / 2) / np.sqrt(len(pairs) / 4)


def test_graph_edges_follow_the_generator_media_type():
    boosted = run(3000)
    assert "media_type" in boosted.truth["graph"]["parents"]["position"]
    assert _video_ahead_z(boosted) > 4.0               # the logging ranker promotes videos
    flat = run(3000, logging_media_boost=[0.0, 0.0, 0.0, 0.0],
               user_model_params={"media_attention": [1, 1, 1, 1], "media_attractiveness": [0, 0, 0, 0]})
    parents = flat.truth["graph"]["parents"]
    assert parents["position"] == ["relevance"] and "media_type" not in parents["click"]
    assert abs(_video_ahead_z(flat)) < 4.0
    cells = ["true_label", "position", "serp_max_show_height"]
    assert joined(flat).groupby(cells)["click_prob"].nunique().max() == 1     # media type no longer matters
    assert joined(boosted).groupby(cells)["click_prob"].nunique().max() > 1
    assert "serp_max_show_height" in parents["click"]


def test_media_type_consistency_varies_presentation_by_impression_and_keeps_the_logger_on_it():
    """Below 1, an impression shows its document's own type with chance c, otherwise a fresh draw, and the
    logging ranker promotes what is shown; at 1 every impression shows the document's own type."""
    def own_share(logs, **changes):
        corpus = simulation_engine(SimulateConfig(**{**SMALL, "n_sessions": 3000, **changes}), 0).corpus
        own = pd.Series(corpus.media_type, index=corpus.doc_ids)
        return (logs.sessions["media_type"] == logs.sessions["doc_id"].map(own)).mean(), \
            logs.sessions.groupby("doc_id")["media_type"].nunique()

    share, types_per_doc = own_share(run(3000))
    assert share == 1.0 and types_per_doc.max() == 1
    varied = run(3000, media_type_consistency=0.5)
    share, types_per_doc = own_share(varied, media_type_consistency=0.5)
    p_same = float(np.sum(np.square(np.asarray(SimulateConfig().media_type_probs))))   # a fresh draw may agree
    assert abs(share - (0.5 + 0.5 * p_same)) < 0.03 and types_per_doc.max() > 1
    assert _video_ahead_z(varied) > 4.0                    # the boost follows the presented type
    assert "media_type" in varied.truth["graph"]["parents"]["click"]
    with pytest.raises(ConfigError, match="media_type_consistency"):
        run(10, media_type_consistency=1.5)


def test_buckets_are_deciles_of_query_frequency():
    logs = run(4000, n_queries=100, n_annotated_queries=30)
    q = logs.queries.sort_values("popularity", ascending=False)
    assert q["bucket"].is_monotonic_increasing
    assert (q["bucket"].value_counts().sort_index() == 100 // N_BUCKETS).all()
    sessions = q.groupby("bucket")["n_sessions"].sum()
    assert sessions[0] > 5 * sessions[N_BUCKETS - 1]
    observed = logs.sessions.groupby("query_id")["session_id"].nunique()
    assert observed.reindex(q["query_id"], fill_value=0).tolist() == q["n_sessions"].tolist()
    a = logs.annotations.merge(q[["query_id", "bucket"]], on="query_id", suffixes=("", "_q"))
    assert (a["bucket"] == a["bucket_q"]).all()


@pytest.mark.parametrize("name", sorted(USER_MODELS))
def test_every_user_model_gives_valid_clicks_and_matching_marginals(name):
    logs = run(4000, seed=3, user_model=name, n_context_factors=2)
    df = joined(logs)
    assert set(df["click"].unique()) <= {0, 1}
    for column in ("examination_prob", "click_prob"):
        assert df[column].between(0, 1).all(), column
    assert (df["click_prob"] <= df["examination_prob"] + 1e-12).all()
    assert_rates_match(df, "position")                # sequential samplers agree with their closed forms
    assert_rates_match(df, "context_0")
    parents = logs.truth["graph"]["parents"]["click"]
    assert {"relevance", "context_0", "context_1"} <= set(parents)
    assert df.groupby("context_0")["click_prob"].mean().std() > 0


@pytest.mark.parametrize("name, params", [
    ("cascade", {"continue_after_click": 0.3, "continue_after_skip": 0.8, "click_noise": 0.3}),
    ("continuous", {"position_power": 0.7, "click_noise": 0.3}),
    ("row_skipping", {"columns": 3, "skip_row": 0.5, "continue_prob": 0.7, "click_noise": 0.3}),
])
def test_browsing_samplers_agree_with_their_marginals_under_strong_settings(name, params):
    df = joined(run(6000, seed=5, user_model=name, user_model_params=params))
    assert_rates_match(df, "position")
    assert_rates_match(df.assign(lower=df["position"] > 3), "lower")


def test_browsing_models_examine_top_down():
    cascade = joined(run(500, user_model="cascade"))
    exam = cascade.pivot(index="session_id", columns="position", values="examination_prob").to_numpy()
    assert (np.diff(exam, axis=1) <= 1e-12).all()
    grid = run(200, user_model="row_skipping", user_model_params={"columns": 3, "skip_row": 0.3,
                                                                   "continue_prob": 0.8})
    theta = grid.truth_sessions.groupby("position")["examination_prob"].first().to_numpy()
    # 004 Eq. (22) by hand for rows of 3: first row (1 - γ) C^col, second row after passing the first
    passed = 0.7 * 0.8 ** 3 + 0.3
    np.testing.assert_allclose(theta[:4], [0.7, 0.7 * 0.8, 0.7 * 0.64, passed * 0.7])


def test_lbd_observation_depends_on_document_features():
    logs = run(300, user_model="lbd", user_model_params={"eta": 0.4})
    params = logs.truth["user_model"]["params"]
    assert len(params["crux_weights"]) == 8 and max(map(abs, params["crux_weights"])) <= 0.4
    assert "features" in logs.truth["graph"]["parents"]["click"]
    df = joined(logs)
    assert df.groupby("position")["examination_prob"].nunique().gt(1).all()   # individual, at every position


@pytest.mark.parametrize("changes, fragment", [
    ({"user_model": "dbn"}, "data.simulate.user_model: 'dbn' is not a user model; allowed values: 'whole_page'"),
    ({"user_model": "pbm", "user_model_params": {"gamma": 1}},
     "data.simulate.user_model_params.gamma: not a parameter of user model 'pbm'; allowed keys: position_power"),
    ({"user_model_params": {"click_noise": 1.5}}, "data.simulate.user_model_params.click_noise: must be a number"),
    ({"user_model_params": {"media_attention": [1, 1]}}, "data.simulate.user_model_params.media_attention"),
    ({"results_per_page": 16}, "data.simulate.results_per_page"),
    ({"media_heights": [100.0]}, "data.simulate.media_heights"),
])
def test_bad_settings_raise_errors_naming_the_key(changes, fragment):
    with pytest.raises(ConfigError) as err:
        run(10, **changes)
    assert fragment in str(err.value)


# ---------------------------------------------------------------------------------------------
def read_lines(path):
    return gzip.decompress(Path(path).read_bytes()).decode().split("\n")[:-1]


def test_baidu_writer_lines_parse_with_the_documented_fields(tmp_path):
    logs = run(40, n_context_factors=1)
    df = logs.sessions.sample(frac=1.0, random_state=0)               # rows shuffled: the writer regroups
    df["dwelling_time"] = np.where(df["click"] == 1, 12.5, np.nan)     # a behaviour column, partly missing
    n = write_baidu_sessions(df, tmp_path / "log.gz")
    lines = read_lines(tmp_path / "log.gz")
    assert n == len(lines) == 40 + len(df)
    expected = logs.sessions.set_index(["session_id", "position"])
    sessions = iter(pd.unique(df["session_id"]))                      # in order of first appearance
    for line in lines:
        fields = line.split("\t")
        if len(fields) == len(BAIDU_QUERY_FIELDS):
            session = next(sessions)
            query = [int(t) for t in fields[1].split(BAIDU_TOKEN_SEP)]
            assert fields[0] == expected.loc[(session, 1), "query_id"] and fields[2] == "-"
            continue
        assert len(fields) == BAIDU_N_RESULT_FIELDS
        row = expected.loc[(session, int(fields[FIELD["position"]]))]
        assert fields[FIELD["url_md5"]] == row["doc_id"]
        assert [int(t) for t in fields[FIELD["title_tokens"]].split(BAIDU_TOKEN_SEP)] == row["title_tokens"].tolist()
        assert query == row["query_tokens"].tolist()
        assert int(fields[FIELD["click"]]) == row["click"] and int(fields[FIELD["media_type"]]) == row["media_type"]
        assert float(fields[FIELD["serp_height"]]) == row["serp_height"]
        assert float(fields[FIELD["serp_max_show_height"]]) == row["serp_max_show_height"]
        assert fields[FIELD["dwelling_time"]] == ("12.5" if row["click"] else "-")
        unused = [fields[i] for i, name in enumerate(BAIDU_RESULT_FIELDS) if name is None or name == "skip"]
        assert set(unused) == {"-"}
    positions = [int(line.split("\t")[0]) for line in lines if line.count("\t") > 2]
    assert positions == list(range(1, 11)) * 40

    write_baidu_annotations(logs.annotations, tmp_path / "ann.gz")
    rows = [line.split("\t") for line in read_lines(tmp_path / "ann.gz")]
    assert {len(r) for r in rows} == {len(BAIDU_ANNOTATION_FIELDS)}
    assert [int(r[4]) for r in rows] == logs.annotations["label"].tolist()
    assert [int(r[5]) for r in rows] == logs.annotations["bucket"].tolist()


def test_baidu_writer_rejects_what_the_layout_cannot_hold(tmp_path):
    df = run(5).sessions
    bad = df.assign(position=df["position"].where(df.index != 3, 31))
    with pytest.raises(SchemaError, match="'position' row 3 is 31"):
        write_baidu_sessions(bad, tmp_path / "x.gz")
    with pytest.raises(SchemaError, match="missing column"):
        write_baidu_sessions(df.drop(columns=["doc_id"]), tmp_path / "x.gz")
    assert not list(tmp_path.iterdir())


def test_write_lays_out_baidu_and_parquet(tmp_path):
    logs = run(250)
    baidu = logs.write(tmp_path / "b", fmt="baidu", sessions_per_file=100)
    assert sorted(p.relative_to(tmp_path / "b").as_posix() for p in baidu) == [
        "annotations.tsv.gz", "train/part-00000.gz", "train/part-00001.gz", "train/part-00002.gz",
        "truth/annotations.parquet", "truth/queries.parquet", "truth/truth.json", "truth/truth_sessions.parquet"]
    assert sum(line.count("\t") == 2 for p in baidu if "train" in p.parts for line in read_lines(p)) == 250
    truth = json.loads((tmp_path / "b" / "truth" / "truth.json").read_text())
    assert truth["seed"] == 0 and truth["user_model"]["name"] == "whole_page"
    assert {"from": "relevance", "to": "position", "type": "directed"} in truth["graph"]["edges"]
    assert all(e["from"] in truth["graph"]["parents"][e["to"]] for e in truth["graph"]["edges"])
    assert "features" in pd.read_parquet(tmp_path / "b" / "truth" / "annotations.parquet").columns
    logs.write(tmp_path / "p", fmt="parquet", sessions_per_file=100)
    back = pd.concat(pd.read_parquet(p) for p in sorted((tmp_path / "p" / "train").glob("*.parquet")))
    assert back["session_id"].tolist() == logs.sessions["session_id"].tolist()
    assert (tmp_path / "p" / "annotations.parquet").exists()
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


# ---------------------------------------------------------------------------------------------
def _well_formed(line: bytes) -> bool:
    try:
        fields = line.decode("utf-8").split("\t")
    except UnicodeDecodeError:
        return False
    def tokens_ok(f: str) -> bool:
        return f == "" or all(t.isdigit() for t in f.split(BAIDU_TOKEN_SEP))

    if len(fields) == len(BAIDU_QUERY_FIELDS):
        return fields[0].isdigit() and fields[1] != "" and tokens_ok(fields[1])
    if len(fields) != BAIDU_N_RESULT_FIELDS:
        return False
    numbers_ok = all(fields[FIELD[n]] == "-" or fields[FIELD[n]].replace(".", "", 1).isdigit()
                     for n in ("serp_height", "serp_max_show_height"))
    return (fields[FIELD["position"]].isdigit() and 1 <= int(fields[FIELD["position"]]) <= 30
            and fields[FIELD["click"]] in ("0", "1") and fields[FIELD["media_type"]].isdigit()
            and tokens_ok(fields[FIELD["title_tokens"]]) and tokens_ok(fields[FIELD["abstract_tokens"]]) and numbers_ok)


def test_sample_is_reproducible_byte_for_byte_and_its_damage_is_documented(tmp_path):
    manifest = write_sample(tmp_path / "sample")
    produced = sorted(p.relative_to(tmp_path / "sample") for p in (tmp_path / "sample").rglob("*") if p.is_file())
    committed = REPO / "data" / "sample"
    assert sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file()) == produced
    for rel in produced:
        assert (committed / rel).read_bytes() == (tmp_path / "sample" / rel).read_bytes(), rel
    assert sum(f["bytes"] for f in manifest["files"]) < 5_000_000

    assert {c["kind"] for c in manifest["corruptions"]} == {k.name for k in KINDS}
    damaged = {(c["file"], c["line"]): c for c in manifest["corruptions"]}
    sessions = results = 0
    for entry in (f for f in manifest["files"] if f["path"].startswith("train/")):
        lines = gzip.decompress((tmp_path / "sample" / entry["path"]).read_bytes()).split(b"\n")[:-1]
        assert len(lines) == entry["lines"]
        for number, line in enumerate(lines, start=1):
            record = damaged.get((entry["path"], number))
            if record is None:
                assert _well_formed(line), (entry["path"], number)
            elif record["kind"] not in ("orphan_result", "duplicate_position"):   # copies of good lines
                assert not _well_formed(line), record
        sessions += entry["sessions"]
        results += entry["result_lines"]
    assert (sessions, results) == (manifest["sessions_written"], manifest["result_lines_written"])
    lost = [c for c in manifest["corruptions"] if c["kind"] in ("empty_query", "broken_query_line",
                                                                 "query_extra_field")]
    assert manifest["sessions_readable"] == sessions - len(lost)
    assert manifest["result_lines_readable"] == results - sum(c["unreadable_result_lines"]
                                                              for c in manifest["corruptions"])
    assert manifest["quarantined_lines"] == sum(c["quarantined_lines"] for c in manifest["corruptions"])
    assert json.loads((committed / MANIFEST).read_text()) == manifest


# ---------------------------------------------------------------------------------------------
def test_prs_clicks_are_binary_relevance_with_symmetric_noise():
    """PRS §4.3/§5.2 by hand: grades 3-4 relevant, (1/p)^η examination, ε+ = 1 - μ, ε- = μ."""
    logs = run(8000, seed=2, user_model="prs", user_model_params={"eta": 1.5, "mu": 0.2})
    df = joined(logs)
    assert logs.truth["user_model"]["params"] == {"eta": 1.5, "mu": 0.2, "relevant_from": 3}
    for (position, label), cell in df.groupby(["position", "true_label"]):
        by_hand = (1 / position) ** 1.5 * (0.8 if label >= 3 else 0.2)
        np.testing.assert_allclose(cell["click_prob"], by_hand)
        np.testing.assert_allclose(cell["examination_prob"], (1 / position) ** 1.5)
    assert_rates_match(df.assign(relevant=df["true_label"] >= 3), ["position", "relevant"])
    # at position 1 the observed rates are ε+ and ε- themselves; grades 1-2 click like grade 0
    top = df[df["position"] == 1].groupby("true_label")["click"].mean()
    assert abs(top[[3, 4]].mean() - 0.8) < 0.05 and abs(top[[0, 1, 2]].mean() - 0.2) < 0.05


def test_prs_relevance_threshold_and_no_position_bias():
    df = joined(run(300, user_model="prs", user_model_params={"eta": 0.0, "mu": 0.0, "relevant_from": 1}))
    np.testing.assert_allclose(df["click_prob"], (df["true_label"] >= 1).astype(float))
    assert (df["click"] == (df["true_label"] >= 1)).all()        # noise-free, all examined: clicks are relevance


@pytest.mark.parametrize("params, fragment", [
    ({"mu": 0.5}, "data.simulate.user_model_params.mu: must be a number in [0, 0.5) (clicks must favour relevance), "
                  "got 0.5"),
    ({"mu": -0.1}, "data.simulate.user_model_params.mu: must be a number in [0, 0.5)"),
    ({"relevant_from": 5}, "data.simulate.user_model_params.relevant_from: must be an integer grade in [1, 4], got 5"),
    ({"click_noise": 0.1}, "data.simulate.user_model_params.click_noise: not a parameter of user model 'prs'; "
                           "allowed keys: eta, mu, relevant_from"),
])
def test_prs_bad_parameters_name_the_key_and_the_allowed_range(params, fragment):
    with pytest.raises(ConfigError) as err:
        run(10, user_model="prs", user_model_params=params)
    assert fragment in str(err.value)
