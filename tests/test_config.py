"""The run config: defaults, safe YAML, every key checked at load, and paths made absolute on the client."""
import dataclasses
import functools
import glob
import os
import typing
from pathlib import Path

import pytest
import yaml

from wpultr.config import (
    MOVED_KEYS,
    ConfigError,
    RunConfig,
    check_machine,
    config_from_dict,
    dump_config,
    load_config,
    parse_overrides,
    to_dict,
)
from wpultr.settings.lightgbm import LightGBMConfig
from wpultr.settings.propensity import PropensityConfig

REPO = Path(__file__).resolve().parents[1]


def test_defaults_resolve_and_round_trip_through_yaml():
    cfg = config_from_dict({})
    again = config_from_dict(yaml.safe_load(dump_config(cfg)))
    assert dump_config(again) == dump_config(cfg)
    assert cfg.ranker.head == [512, 256, 128]
    assert cfg.data.page_features["position"] == "ordinal"


@pytest.mark.parametrize("values, fragment", [
    ({"train": {"loss": "hinge"}},
     "train.loss: 'hinge' is not allowed; allowed values: 'pointwise', 'listwise', 'lambdarank'"),
    ({"train": {"method": "bal", "loss": "lambdarank"}},
     "train.loss: 'lambdarank' (LambdaMART's λ-gradients as the booster's objective) needs ranker.backbone 'lightgbm'"),
    ({"train": {"method": "ipw", "loss": "lambdarank"}, "ranker": {"backbone": "lightgbm"}},
     "train.loss: lambdarank is not supported by train.method: ipw (supports: pointwise, listwise)"),
    ({"ranker": {"backbone": "gpt"}}, "ranker.backbone"),
    ({"trian": {}}, "unknown config key(s) trian"),
    ({"train": {"epochs": "three"}}, "train.epochs: expected an integer"),
    ({"train": {"epochs": 0}}, "train.epochs: must be > 0"),
    ({"train": {"method": "ipw", "streaming": True}},
     "train.streaming: true is not supported by train.method: ipw (supports: false)"),
    ({"train": {"method": "lightgbm_lambdarank", "processes": 2}},   # a spec without processes: refused, key named
     "train.processes: 2 is not supported by train.method: lightgbm_lambdarank (supports: 1)"),
    ({"train": {"method": "bal", "streaming": True}, "ranker": {"backbone": "lightgbm"}},
     "ranker.backbone: train.streaming: true trains the 'mlp' backbone only"),
    ({"train": {"streaming": True}, "data": {"max_sessions": 100}},
     "data.max_sessions: must be null with train.streaming: true"),
    ({"train": {"processes": 0}}, "train.processes: must be an integer >= 1, got 0"),
    ({"data": {"valid_fraction": 1.5}}, "data.valid_fraction"),
    ({"data": {"page_features": {"position": "ordinall"}}}, "data.page_features.position: kind 'ordinall'"),
    ({"data": {"source": "baidu", "train": ["x.gz"]}}, "data.annotations"),
    ({"run_dir": "nosuch://bucket/{name}"}, "run_dir: unknown storage protocol 'nosuch' in 'nosuch://bucket/{name}'; "
                                            "allowed protocols: "),
    ({"data": {"source": "parquet", "train": ["nosuch://b/*.pq"]}}, "data.train: unknown storage protocol 'nosuch'"),
    ({"data": {"source": "baidu", "train": ["x.gz"], "annotations": "nosuch://b/a.tsv"}},
     "data.annotations: unknown storage protocol 'nosuch'"),
    ({"data": {"simulate": {"n_sessions": -1}}}, "data.simulate.n_sessions"),
    ({"data": {"simulate": {"media_type_consistency": 2}}}, "data.simulate.media_type_consistency"),
    ({"bal": {"click_model": {"max_rows": 0}}}, "bal.click_model.max_rows: must be > 0 or null, got 0"),
    ({"train": {"select_metric": "DCG@20"}}, "train.select_metric: 'DCG@20' is not allowed; allowed values: DCG@1"),
    ({"bal": {"features": ["colour"]}}, "bal.features: ['colour'] are not declared page features"),
    ({"train": {"method": "bal", "loss": "listwise"}, "bal": {"click_model": {"form": "additive"}}},
     "bal.click_model.form: BAL's listwise ranker step (train.loss) divides each click"),
    ({"train": {"method": "bal", "loss": "lambdarank"}, "ranker": {"backbone": "lightgbm"},
      "bal": {"click_model": {"form": "additive"}}},
     "bal.click_model.form: BAL's lambdarank ranker step (train.loss) divides each click"),
])
def test_bad_values_name_the_key(values, fragment):
    with pytest.raises(ConfigError) as err:
        config_from_dict(values)
    assert fragment in str(err.value)


# The probes of issue 15 item 9, given as the CLI gives them (--set KEY=VALUE over a YAML file): each
# passed validation before and failed later; now each fails at load with the key and what is allowed.
def _load_error(tmp_path, override: str, text: str = "name: probe\n") -> str:
    """The ConfigError message of loading a small run config with one --set override."""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path, parse_overrides([override]))
    return str(err.value)


@pytest.mark.parametrize("override, message", [
    ("ranker.head=[-5]", "ranker.head: must be a list of at most 32 layer widths in [1, 65536] (empty: a linear "
                         "head), got [-5]"),
    ("ranker.dropout=1.5", "ranker.dropout: must be in [0, 1), got 1.5"),
    ("seed=-1", "seed: must be an integer in [0, 2**32 - 1], got -1"),
    ("run_dir=runs/{0}", "run_dir: must be a non-empty path; placeholders allowed: {name}, {seed}, got 'runs/{0}'"),
    ("cluster.memory_limit=lots", "cluster.memory_limit: must be a size such as '4GiB' or '500MB', or 'auto', "
                                  "got 'lots'"),
    ("cluster.scheduler=notanaddress", "cluster.scheduler: must be null (a LocalCluster) or a scheduler address: "
                                       "tcp://host:port"),
    ("train.weight_decay=-1", "train.weight_decay: must be a finite number >= 0, got -1.0"),
    ("data.max_sessions=0", "data.max_sessions: must be null (every session) or an integer >= 1, got 0"),
    ("propensity.clip=5", "propensity.clip: must be in (0, 1], got 5.0"),
    ("dla.max_weight=0.1", "dla.max_weight: must be a finite number > 1, got 0.1"),
    ("regression_em.step_size=-3", "regression_em.step_size: must be in (0, 1], got -3.0"),
    ("ranker.lightgbm.rounds=0", "ranker.lightgbm.rounds: must be an integer >= 1, got 0"),
])
def test_issue_probes_fail_at_load_with_the_key_and_the_allowed_values(tmp_path, override, message):
    assert _load_error(tmp_path, override, "name: probe\ntrain: {epochs: 1}\n").startswith(message)


# One bad value for every key that has a range, format or set of allowed values (booleans are
# type-checked only). `test_every_key_has_a_bad_value_here` keeps this table complete: a new key
# needs a check and an entry here.
BAD: dict[str, typing.Any] = {
    "name": "..", "seed": 2 ** 32, "run_dir": "runs/{name!r}",
    "data.source": "hdfs", "data.train": [""], "data.annotations": "", "data.valid_fraction": 1.0,
    "data.page_features": {"position": "ordinall"}, "data.max_sessions": 0, "data.partition_rows": 0,
    "data.heldout": [""], "data.clicks": "biased", "data.embeddings.width": 0, "data.embeddings.ltr_features": ["bm26"],
    "data.embeddings.batch_rows": 0,
    "data.simulate.n_queries": 5, "data.simulate.docs_per_query": 0, "data.simulate.n_sessions": 0,
    "data.simulate.n_documents": 0,
    "data.simulate.n_annotated_queries": 0, "data.simulate.results_per_page": 0, "data.simulate.vocab_size": 10,
    "data.simulate.n_dense_features": 0, "data.simulate.zipf_exponent": -1.0, "data.simulate.logging_noise": -1.0,
    "data.simulate.user_model": "dbn", "data.simulate.user_model_params": {"nope": 1},
    "data.simulate.n_context_factors": -1, "data.simulate.context_levels": 1, "data.simulate.context_strength": 1.0,
    "data.simulate.media_type_probs": [0.5, 0.2, 0.2, 0.2], "data.simulate.media_type_consistency": 2.0,
    "data.simulate.media_heights": [0.0, 1.0, 1.0, 1.0], "data.simulate.height_spread": -1.0,
    "data.simulate.logging_media_boost": [0.0], "data.simulate.screen_height": 0.0,
    "data.simulate.scroll_screens": -1.0, "data.simulate.corpus": "msn", "data.simulate.letor_path": [""],
    "data.simulate.position_blocks": 0, "data.simulate.logging_ranker": "svm",
    "data.simulate.logging_ranker_queries": 0,
    "data.simulate.media_label_tilt": [0.0, 0.0, 99.0, 0.0],
    "data.simulate.media_click_scale": [1.0, 1.0, 2.0, 1.0],
    "cluster.scheduler": "tcp://host", "cluster.n_workers": 0, "cluster.threads_per_worker": 0,
    "cluster.memory_limit": "0", "cluster.connect_timeout": 0.0, "cluster.no_worker_timeout": -1.0,
    "cluster.rank_workers": [""], "cluster.rank_resources": {"GPU": 0},
    "ranker.backbone": "gpt", "ranker.head": [0], "ranker.dropout": 1.0, "ranker.bert.path": "",
    "ranker.bert.max_length": 4, "ranker.bert.special_tokens": {"pad": 0}, "ranker.bert.hidden_size": 0,
    "ranker.bert.num_hidden_layers": 0, "ranker.bert.num_attention_heads": 0, "ranker.bert.intermediate_size": 0,
    "ranker.lightgbm.rounds_per_epoch": 0, "ranker.lightgbm.learning_rate": 2.0, "ranker.lightgbm.num_leaves": 1,
    "ranker.lightgbm.min_data_in_leaf": 0, "ranker.lightgbm.num_threads": -1,
    "train.method": "magic", "train.loss": "hinge", "train.epochs": 0, "train.warmup_epochs": -1,
    "train.mlm_probability": 1.0, "train.mlm_weight": -1.0, "train.select_metric": "AUC", "train.batch_size": 0,
    "train.learning_rate": float("inf"), "train.weight_decay": float("nan"), "train.device": "tpu",
    "train.precision": "fp8", "train.processes": 0,
    "evaluation.ks": [3, 3], "evaluation.heldout_sessions": 0.5,
    "discovery.n_sessions": 0, "discovery.n_strata": 0, "discovery.ci_test": "gsq", "discovery.alpha": 1.0,
    "discovery.click_rows": 5, "discovery.click_test": "document", "discovery.click_error": "per_test",
    "discovery.click_knots": 2, "discovery.near_deterministic": 0.0,
    "discovery.max_depth": -1, "discovery.n_bootstrap": -1, "discovery.seed_offset": -1,
    "discovery.kci.kernel": "Cosine", "discovery.kci.est_width": "mean", "discovery.kci.polyd": 0,
    "discovery.kci.engine": "fast", "discovery.kci.cache_mib": 0, "discovery.rcit.approx": "exact",
    "discovery.rcit.num_f": 0, "discovery.rcit.num_f2": 0, "discovery.fastkci.n_clusters": 0,
    "discovery.fastkci.n_repeats": 0, "discovery.preprocess.bradley_terry_ridge": 0.0,
    "discovery.preprocess.embedding_dim": 0, "discovery.preprocess.seed": -1,
    "propensity.source": "oracle", "propensity.table": {"0": 1.0},
    "propensity.clip": 0.0, "propensity.randomisation_sessions": 0, "propensity.harvest_iterations": 0,
    "regression_em.step_size": 1.5, "dla.ranker_loss_weight": -1.0,
    "dla.propensity_learning_rate": 0.0, "dla.max_weight": 1.0,
    "pairwise_debias.regularization_p": 0.0, "pairwise_debias.step_size": 0.0, "ranker.lightgbm.rounds": 0,
    "ranker.lightgbm.position_bias_regularization": -1.0, "ranker.lightgbm.eval_points": 0,
    "prs.weighting": "dcg", "prs.clip": 0.0, "ranker.lightgbm.distributed": "yes",
    "bal.graph": "learned", "bal.features": [], "bal.estimator_rows": 0, "bal.graph_bootstrap": -1,
    "bal.pair_weights": "none", "bal.cpu_threads": 0,
    "discovery.min_within_document_share": 1.0,
    "bal.click_model.form": "linear", "bal.click_model.hidden": [0], "bal.click_model.embedding_dim": 0,
    "bal.click_model.epochs": 0, "bal.click_model.learning_rate": 0.0, "bal.click_model.batch_size": 0,
    "bal.click_model.max_rows": 0, "bal.click_model.document_effects": "yes", "bal.click_model.document_ridge": 0.0,
    "bal.influence.hidden": [0], "bal.influence.epochs": 0, "bal.influence.patience": 0,
    "bal.influence.min_delta": -1.0, "bal.influence.learning_rate": 0.0, "bal.influence.weight_decay": -1.0,
    "bal.influence.lr_decay": 0.0, "bal.influence.lr_patience": -1, "bal.influence.batch_size": 0,
    "bal.influence.valid_fraction": 1.0, "bal.influence.min_std": 0.0, "bal.influence.numerator": "ratio",
    "bal.influence.device": "tpu",
    "bal.weights.n_permutations": 0, "bal.weights.max_permuted_rows": 0, "bal.weights.max_weight": 0.5,
    "bal.weights.clip_quantile": 0.0,
    "identifiability.on_disconnected": "ignore", "identifiability.factors": [],
    "identifiability.position_weight": 0.0, "identifiability.intervention_sessions": 0,
    "lbd.variant": "both", "lbd.gradient_penalty": -1.0, "lbd.drop_probability": 1.0,
    "lbd.observation_hidden": [0], "lbd.observation_learning_rate": 0.0,
    "pairwise.joint_model": "cascade", "pairwise.grid_columns": 0, "pairwise.skip_row": 1.0,
    "pairwise.continue_prob": 0.0, "pairwise.sigma": 0.0, "pairwise.lambda_weight": "dcg",
    "xgboost.rounds": 0, "xgboost.learning_rate": 0.0, "xgboost.max_depth": 0, "xgboost.objective": "rank:map",
    "xgboost.lambdarank_pair_method": "all", "xgboost.lambdarank_num_pair_per_sample": 0,
    "xgboost.lambdarank_bias_norm": -1.0, "xgboost.early_stopping": "valid", "xgboost.early_stopping_rounds": 0,
    "xgboost.eval_every": 0, "xgboost.valid_sessions_fraction": 1.0, "xgboost.num_threads": -1,
}


def _leaf_keys(cls: type, prefix: str = "") -> list[str]:
    """Dotted keys of every non-section field of a config dataclass, booleans left out."""
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            keys += _leaf_keys(hints[f.name], key + ".")
        elif hints[f.name] is not bool:
            keys.append(key)
    return keys


def test_every_key_has_a_bad_value_here():
    assert sorted(set(_leaf_keys(RunConfig)) - set(BAD)) == []
    assert sorted(set(BAD) - set(_leaf_keys(RunConfig))) == []


def _nested(dotted: str, value: typing.Any) -> dict:
    for part in reversed(dotted.split(".")):
        value = {part: value}
    return value


@pytest.mark.parametrize("key", sorted(BAD))
def test_every_key_rejects_a_bad_value_naming_itself(key):
    with pytest.raises(ConfigError) as err:
        config_from_dict(_nested(key, BAD[key]))
    message = str(err.value)
    assert message.startswith(key) and message[len(key)] in ":.[", message
    assert any(word in message for word in ("must", "allowed", "expected", "one of", "needs")), message


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "tls://scheduler.example.org:8786", "localhost:8786",
                                     "tcp://[::1]:8786", "inproc://10.0.0.1/1234/1", "ucx://10.1.1.1:13337"])
def test_scheduler_addresses_in_dask_forms_are_accepted(address):
    assert config_from_dict({"cluster": {"scheduler": address}}).cluster.scheduler == address


@pytest.mark.parametrize("address", ["tcp://host:0", "tcp://host:70000", "http//host:1", "host", "tcp://:8786"])
def test_malformed_scheduler_addresses_are_rejected(address):
    with pytest.raises(ConfigError, match="cluster.scheduler"):
        config_from_dict({"cluster": {"scheduler": address}})


def test_bert_heads_must_divide_the_hidden_size():
    with pytest.raises(ConfigError, match=r"ranker.bert.hidden_size: must be a multiple of num_attention_heads \(3\)"):
        config_from_dict({"ranker": {"bert": {"num_attention_heads": 3}}})


def test_memory_limits_parse_as_dask_sizes():
    assert config_from_dict({"cluster": {"memory_limit": "500MB"}}).cluster.memory_limit == "500MB"
    assert config_from_dict({"cluster": {"memory_limit": "auto"}}).cluster.memory_limit == "auto"


def test_each_method_has_its_own_validated_section_and_an_old_baselines_key_says_where_it_lives(tmp_path):
    """Issue 33: the flat `baselines` bag is split per method; a key of it in a user's YAML fails naming its new home,
    and the LightGBM knobs live in `ranker.lightgbm` alone."""
    with pytest.raises(ConfigError, match=r"propensity.clip: must be in \(0, 1\]"):
        PropensityConfig(clip=5.0)
    assert config_from_dict({"ranker": {"lightgbm": {"rounds": 7}}}).ranker.lightgbm == LightGBMConfig(rounds=7)
    assert config_from_dict({"dla": {"max_weight": 5}}).dla.max_weight == 5.0
    for old, new in MOVED_KEYS.items():
        if not old.startswith("baselines."):
            continue                   # a key moved out of a section that still exists: test_separability
        with pytest.raises(ConfigError) as err:
            config_from_dict({"baselines": {old.split(".", 1)[1]: 1}})
        assert str(err.value) == f"{old}: moved to {new} (the baselines section is split per method)"
        *section, leaf = new.split(".")
        assert leaf in {f.name for f in dataclasses.fields(functools.reduce(getattr, section, RunConfig()))}
    with pytest.raises(ConfigError, match=r"^baselines\.nonsense: the baselines section is split per method"):
        config_from_dict({"baselines": {"nonsense": 1}})
    (tmp_path / "old.yaml").write_text("baselines: {rem_step_size: 0.5}\n")
    for overrides in (None, {"baselines.dla_max_weight": 3.0}):     # in the file, or given with --set
        with pytest.raises(ConfigError, match=r"^baselines\.(rem_step_size|dla_max_weight): moved to "):
            load_config(tmp_path / "old.yaml" if overrides is None else REPO / "pipelines" / "demo.yaml", overrides)


def test_load_config_uses_safe_yaml_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("name: x\ntrain:\n  epochs: 2\n")
    cfg = load_config(path, {"train.learning_rate": 0.01})
    assert (cfg.name, cfg.train.epochs, cfg.train.learning_rate) == ("x", 2, 0.01)
    assert cfg.source == path.resolve()
    path.write_text("!!python/object/apply:os.system ['echo unsafe']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


# --------------------------------------------------------------------------------------------- paths
def test_relative_paths_in_a_file_are_relative_to_the_file_and_overrides_to_the_working_directory(
        tmp_path, monkeypatch):
    project = tmp_path / "pro{j}ect"          # braces: run_dir is a format template
    (project / "conf").mkdir(parents=True)
    path = project / "conf" / "run.yaml"
    path.write_text(yaml.safe_dump({
        "name": "r1", "run_dir": "out/{name}-{seed}",
        "data": {"source": "baidu", "train": ["logs/*.gz", "/abs/x.gz", "memory://bucket/y.gz"],
                 "annotations": "labels/a.tsv.gz"},
        "ranker": {"bert": {"path": "~/ckpt"}}}))
    monkeypatch.chdir(project)
    cfg = load_config(Path("conf/run.yaml"), parse_overrides(["ranker.bert.path=other/ckpt"]))
    monkeypatch.chdir(tmp_path)               # a worker elsewhere sees the same files
    conf = project / "conf"
    assert cfg.data.train == [str(conf / "logs/*.gz"), "/abs/x.gz", "memory://bucket/y.gz"]
    assert cfg.data.annotations == str(conf / "labels/a.tsv.gz")
    assert cfg.ranker.bert.path == str(project / "other/ckpt")          # --set: the working directory
    assert cfg.resolved_run_dir == conf / "out" / "r1-0"
    again = config_from_dict(yaml.safe_load(dump_config(cfg)))   # what a worker rebuilds: unchanged
    assert dump_config(again) == dump_config(cfg)
    home = load_config(path, parse_overrides(["data.annotations=~/labels.tsv"]))
    assert home.data.annotations == str(Path.home() / "labels.tsv")


@pytest.mark.parametrize("pipeline", sorted(p.name for p in (REPO / "pipelines").glob("*.yaml")))
@pytest.mark.parametrize("cwd", ["repo", "elsewhere"])
def test_repository_pipelines_resolve_to_the_same_places_from_any_working_directory(pipeline, cwd, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.chdir(REPO if cwd == "repo" else tmp_path)
    cfg = load_config(REPO / "pipelines" / pipeline)
    assert cfg.resolved_run_dir == REPO / "runs" / cfg.name
    for pattern in cfg.data.train:
        assert os.path.isabs(pattern) and glob.glob(pattern), pattern
    if cfg.data.annotations:
        assert Path(cfg.data.annotations) in (REPO / "data/sample/annotations.tsv.gz",
                                              REPO / "data/sample_embeddings/annotations.feather")
    for pattern in cfg.data.heldout:
        assert os.path.isabs(pattern) and glob.glob(pattern), pattern
    assert all(os.path.isabs(v) for v in [cfg.run_dir, *cfg.data.train] if v)
    assert to_dict(cfg)["run_dir"] == cfg.run_dir


def test_loading_a_config_imports_neither_torch_nor_causal_learn():
    """The CLI validates a config before any heavy work; its modules must stay light to import."""
    import subprocess
    import sys
    code = ("import sys, wpultr.config; "
            "print(sorted(m for m in ('torch', 'causallearn', 'transformers', 'distributed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------------------------- bounded inputs
# Issue 29 item 11: a config is refused at load, in one line, when its YAML would expand beyond reason or its
# sizes beyond what export accepts and what this machine has.
def _alias_bomb(levels: int) -> str:
    """A flow mapping whose last value expands to 9 ** levels strings through aliases."""
    entries = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    entries += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "{" + ", ".join(entries) + "}"


@pytest.mark.parametrize("value, message", [
    (_alias_bomb(6), "more than 100000 values once its aliases (*name) are expanded"),   # 531441 strings
    ("[" * 50_000 + "]" * 50_000, "nested more than 64 levels deep"),
    ("&a [1, *a]", "an alias (*name) inside the value it names"),
])
def test_alias_bombs_deep_nesting_and_loops_are_refused_in_one_line(tmp_path, value, message):
    path = tmp_path / "run.yaml"
    path.write_text(f"name: probe\nranker:\n  head: {value}\n")
    for load, where in ((lambda: load_config(path), str(path)),
                        (lambda: parse_overrides([f"ranker.head={value}"]), "--set ranker.head")):
        with pytest.raises(ConfigError) as err:
            load()
        assert str(err.value).startswith(f"{where}: ") and message in str(err.value), str(err.value)[:300]
        assert "\n" not in str(err.value)


def test_anchors_and_merge_keys_within_the_bounds_still_load(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("name: probe\nranker: {head: &widths [64, 32]}\nbal: {click_model: {hidden: *widths}}\n")
    cfg = load_config(path)
    assert cfg.ranker.head == [64, 32] and cfg.bal.click_model.hidden == [64, 32]


def test_messages_show_at_most_200_characters_of_a_value():
    with pytest.raises(ConfigError) as err:
        config_from_dict({"ranker": {"head": "x" * 100_000}})
    assert str(err.value).startswith("ranker.head: expected a list, got 'xxx") and len(str(err.value)) < 260
    with pytest.raises(ConfigError) as err:
        config_from_dict({"train": {"learning_rate": [1] * 100_000}})
    assert str(err.value).startswith("train.learning_rate: ") and len(str(err.value)) < 260


@pytest.mark.parametrize("override, message", [
    ("ranker.head=[70000]", "ranker.head: must be a list of at most 32 layer widths in [1, 65536]"),
    ("ranker.head=[100000000]", "ranker.head: must be a list of at most 32 layer widths in [1, 65536]"),
    ("ranker.head=[" + ", ".join(["8"] * 33) + "]", "ranker.head: must be a list of at most 32 layer widths"),
    ("ranker.head=[" + ", ".join(["65536"] * 32) + "]",            # 31 layers of 65536²: 2 TB of training state
     "ranker.head: must be layer widths whose training state fits this machine's"),
    ("ranker.bert.hidden_size=100000", "ranker.bert.hidden_size: must be an integer in [1, 8192]"),
    ("ranker.bert.intermediate_size=70000", "ranker.bert.intermediate_size: must be an integer in [1, 65536]"),
    ("ranker.bert.num_hidden_layers=1000", "ranker.bert.num_hidden_layers: must be an integer in [1, 96]"),
    ("train.processes=1000", f"train.processes: must be an integer in [1, {max(os.cpu_count() or 1, 1)}]"),
    ("cluster.n_workers=1000", f"cluster.n_workers: must be an integer in [1, {max(os.cpu_count() or 1, 2)}]"),
    ("cluster.threads_per_worker=1000", "cluster.threads_per_worker: must be an integer in [1, "),
])
def test_sizes_beyond_export_and_this_machine_are_refused_at_load(tmp_path, override, message):
    error = _load_error(tmp_path, override)
    assert error.startswith(message) and len(error) < 400, error


def test_the_config_bounds_are_the_ones_a_saved_ranker_is_checked_against():
    from wpultr.rankers import bert, mlp
    from wpultr.settings import ranker as C
    assert mlp.MLPRanker.ARGS["hidden"].high == C.MAX_WIDTH and mlp.MLPRanker.ARGS["hidden"].max_items == C.MAX_LAYERS
    assert bert.BERT_CONFIG_ARGS["hidden_size"].high == C.MAX_BERT_HIDDEN
    assert bert.BERT_CONFIG_ARGS["num_hidden_layers"].high == C.MAX_BERT_LAYERS
    assert bert.BERT_CONFIG_ARGS["intermediate_size"].high == C.MAX_WIDTH
    assert bert.BertRanker.ARGS["max_length"].high == C.MAX_TOKENS
    widest = config_from_dict({"ranker": {"head": [C.MAX_WIDTH]}})     # the bound itself loads
    assert widest.ranker.head == [C.MAX_WIDTH]
    # what this machine has bounds a config that is to run here, not a saved one read (evaluate, export)
    saved = config_from_dict({"cluster": {"n_workers": 1000}, "train": {"processes": 1000}})
    assert saved.cluster.n_workers == 1000 and saved.train.processes == 1000
    external = config_from_dict({"cluster": {"n_workers": 1000, "scheduler": "tcp://10.0.0.1:8786"}})
    assert check_machine(external) is external                          # an external cluster's size is its own
    ranks = config_from_dict({"cluster": {"scheduler": "tcp://10.0.0.1:8786"}, "train": {"processes": 1000}})
    assert check_machine(ranks) is ranks                 # with a scheduler the DDP ranks run on its workers


def test_page_features_are_parsed_once_where_the_data_section_is_set():
    """`data.page_features` is parsed when set (built or assigned) and read parsed everywhere
    (`data.parsed_page_features`): `schema.page_features_from_config` has one caller in the package (issue 33)."""
    import ast

    import wpultr
    from wpultr.schema import FeatureKind, PageFeature
    cfg = config_from_dict({"data": {"page_features": {"position": "ordinal", "media": "categorical"}}})
    assert cfg.data.parsed_page_features == (PageFeature("position", FeatureKind.ORDINAL),
                                             PageFeature("media", FeatureKind.CATEGORICAL))
    cfg.data.page_features = {"height": "continuous"}
    assert cfg.data.parsed_page_features == (PageFeature("height", FeatureKind.CONTINUOUS),)
    assert "parsed_page_features" not in to_dict(cfg)["data"]
    with pytest.raises(ConfigError, match="^data.page_features.height: kind 'size' is not one of"):
        cfg.data.page_features = {"height": "size"}
    calls = [str(path.relative_to(Path(wpultr.__file__).parent)) for path in Path(wpultr.__file__).parent.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
             == "page_features_from_config"]
    assert calls == ["settings/data.py"]


def test_a_run_directory_written_before_the_baselines_split_still_loads(tmp_path):
    """A saved config.yaml with the old flat baselines section: each key where it lives now, and where both sections
    spelled a LightGBM knob, the one the run's method read (the lambdarank methods read baselines.lightgbm_*)."""
    from wpultr.config import dump_config, saved_config
    for method, lr in (("lightgbm_lambdarank", 0.3), ("naive", 0.05)):
        values = yaml.safe_load(dump_config(config_from_dict({"train": {"method": method}})))
        for section in ("propensity", "regression_em", "dla", "pairwise_debias", "prs"):    # not written then
            values.pop(section)
        for key in ("rounds", "position_bias_regularization", "eval_points", "distributed"):
            values["ranker"]["lightgbm"].pop(key)
        values["ranker"]["lightgbm"]["learning_rate"] = 0.05
        values["baselines"] = {"rem_step_size": 0.25, "lightgbm_learning_rate": 0.3, "lightgbm_rounds": 7,
                               "pair_weighting": "pns", "propensity_clip": 0.02}
        path = tmp_path / f"{method}.yaml"
        path.write_text(yaml.safe_dump(values))
        with pytest.raises(ConfigError, match="moved to"):      # a user's own file is told where the key went
            config_from_dict(values)
        cfg = saved_config(path)
        assert (cfg.regression_em.step_size, cfg.ranker.lightgbm.rounds, cfg.prs.weighting, cfg.propensity.clip) == \
            (0.25, 7, "pns", 0.02)
        assert cfg.ranker.lightgbm.learning_rate == lr
