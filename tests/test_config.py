"""The run config: defaults, safe YAML, and errors that name the key and the allowed values."""
import pytest
import yaml

from wpultr.config import ConfigError, config_from_dict, dump_config, load_config


def test_defaults_resolve_and_round_trip_through_yaml():
    cfg = config_from_dict({})
    again = config_from_dict(yaml.safe_load(dump_config(cfg)))
    assert dump_config(again) == dump_config(cfg)
    assert cfg.ranker.head == [512, 256, 128]
    assert cfg.data.page_features["position"] == "ordinal"


@pytest.mark.parametrize("values, fragment", [
    ({"train": {"loss": "hinge"}}, "train.loss: 'hinge' is not allowed; allowed values: 'pointwise', 'listwise'"),
    ({"ranker": {"backbone": "gpt"}}, "ranker.backbone"),
    ({"trian": {}}, "unknown config key(s) trian"),
    ({"train": {"epochs": "three"}}, "train.epochs: expected an integer"),
    ({"train": {"epochs": 0}}, "train.epochs: must be > 0"),
    ({"data": {"valid_fraction": 1.5}}, "data.valid_fraction"),
    ({"data": {"page_features": {"position": "ordinall"}}}, "data.page_features.position: kind 'ordinall'"),
    ({"data": {"source": "baidu", "train": ["x.gz"]}}, "data.annotations"),
    ({"data": {"simulate": {"n_sessions": -1}}}, "data.simulate.n_sessions"),
    ({"data": {"simulate": {"media_type_consistency": 2}}}, "data.simulate.media_type_consistency"),
    ({"bal": {"click_model": {"max_rows": 0}}}, "bal.click_model.max_rows: expected > 0 or null, got 0"),
])
def test_bad_values_name_the_key(values, fragment):
    with pytest.raises(ConfigError) as err:
        config_from_dict(values)
    assert fragment in str(err.value)


def test_load_config_uses_safe_yaml_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("name: x\ntrain:\n  epochs: 2\n")
    cfg = load_config(path, {"train.learning_rate": 0.01})
    assert (cfg.name, cfg.train.epochs, cfg.train.learning_rate) == ("x", 2, 0.01)
    path.write_text("!!python/object/apply:os.system ['echo unsafe']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_loading_a_config_imports_neither_torch_nor_causal_learn():
    """The CLI validates a config before any heavy work; its modules must stay light to import."""
    import subprocess
    import sys
    code = ("import sys, wpultr.config; "
            "print(sorted(m for m in ('torch', 'causallearn', 'transformers', 'distributed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
