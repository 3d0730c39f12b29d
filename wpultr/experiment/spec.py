"""The experiment spec: its YAML, the runs it expands to, their records and the experiment directory's file names.

An experiment YAML (see `pipelines/reproduce/`) is a `base` run config plus the grid to run over it:

```yaml
name: whole_page                   # default: the file's stem
out_dir: runs/experiments/{name}   # experiment directory (relative to the working directory)
base: {...}                        # a run config as in pipelines/*.yaml, or the path of one (relative to this file)
methods:                           # one row of the tables each; overrides are dotted keys, values replace
  - {label: Naive, overrides: {train.method: naive}}
  - {label: PB-BAL, overrides: {train.method: bal, bal.graph: position}}
seeds: [0, 1, 2, 3, 4]
settings:                          # optional: named override sets applied before a method's (simulators, ...)
  strong_position: {data.simulate.user_model_params.position_power: 2.0}
tables: {baseline: Naive, table3: [BAL-pos, BAL-MM, BAL], fig5: [Naive, BAL, PB-BAL, FB-BAL]}
#   sweep: {metric: nDCG@10, x_label: η, groups: {sim: {eta0: 0.0, eta0.6: 0.6}}}   # a metric against settings
significance: {alpha: 0.05, rule: majority}
parallel: null                     # runs at once; default: the cluster's worker threads
on_invalid_run: error              # error | record (a run config that does not validate fails that run only)
```

Each (setting, method, seed) becomes one run config: `name` = `<experiment>.<setting>.<label>.s<seed>`,
`seed` = the seed, `run_dir` = `<out_dir>/runs/<setting>/<label>/seed_<seed>` (the base's name, seed and
run_dir are replaced). Methods may not override what the simulated data or the query split depend on
(`seed`, `data.simulate.*`, `data.source`, …): every method of one (setting, seed) sees the same logs and
the same test queries, so their comparison is paired. Settings may change anything but those three keys.

Runs go to the cluster as tasks (at most `parallel` at once); inside a worker a task calls
`run_pipeline(cfg, client=worker_client())`, so the run's own data-parallel stages use the same cluster.
A run whose stages are all done with the same config is skipped (resume); a run that raises is recorded
(setting, label, seed, error) and the rest go on.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..config import (
    PATH_KEYS,
    ConfigError,
    config_from_dict,
    file_relative_paths,
    from_mapping,
    read_yaml_mapping,
    set_dotted,
    to_dict,
)
from ..rundir.ownership import output_of, output_path
from ..settings.methods import learns_graph

EXPERIMENT_FILE = "experiment.yaml"     # the resolved experiment, written beside its runs
# what an experiment's files in out_dir may replace: only what `wpultr experiment` wrote there (its manifest)
EXPERIMENT_OUTPUT = output_of("wpultr experiment")
RUNS_JSON = "runs.json"                 # one record per run: status, seconds, error
RUNS_CSV = "runs.csv"
FAILURE_FILE = "failure.txt"            # in a run directory whose last attempt raised
DEFAULT_SETTING = "main"
# Keys the data or the split of a run depend on: the same for every method of a (setting, seed).
PAIRED_KEYS = ("seed", "name", "run_dir", "data.source", "data.train", "data.heldout", "data.annotations",
               "data.valid_fraction", "data.simulate", "data.embeddings", "data.max_sessions")
SETTING_FORBIDDEN = ("seed", "name", "run_dir")
_SLUG = re.compile(r"[^A-Za-z0-9_.+-]+")


# ---------------------------------------------------------------------------------------------
# The experiment config
# ---------------------------------------------------------------------------------------------
@dataclass
class MethodSpec:
    label: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepSpec:
    """A metric against a numeric value of the settings (LBD Fig. 3: nDCG@10 against the coupling level η):
    one table (rows: labels, columns: settings in x order) and one line figure per group of `groups`,
    which maps a group name to {setting: x value}. No groups: no sweep."""
    metric: str = "nDCG@10"
    x_label: str = "setting"
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    labels: list[str] | None = None             # default: every method


@dataclass
class TablesSpec:
    baseline: str | None = None                 # significance reference and Fig. 4 "original ranker";
    #                                             default: first method
    table1: list[str] | None = None             # default: every method
    table2: list[str] | None = None             # default: every method
    table3: list[str] = field(default_factory=list)
    fig3: list[str] | None = None               # default: methods whose train.method is bal
    fig4: list[str] | None = None               # default: every method
    fig5: list[str] = field(default_factory=list)
    fig4_original: Literal["logging", "baseline"] = "logging"
    fig4_positions: int = 10
    sweep: SweepSpec = field(default_factory=SweepSpec)


@dataclass
class SignificanceSpec:
    alpha: float = 0.05
    rule: Literal["majority", "all"] = "majority"


@dataclass
class ExperimentSpec:
    """The raw, type-checked experiment YAML (`from_mapping` names unknown or ill-typed keys)."""
    name: str | None = None
    out_dir: str = "runs/experiments/{name}"
    base: Any = None
    methods: list[MethodSpec] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    tables: TablesSpec = field(default_factory=TablesSpec)
    significance: SignificanceSpec = field(default_factory=SignificanceSpec)
    parallel: int | None = None
    on_invalid_run: Literal["error", "record"] = "error"


@dataclass(frozen=True)
class RunSpec:
    """One (setting, method, seed): its resolved run config, or why it has none."""
    setting: str
    label: str
    seed: int
    run_dir: Path
    config: dict[str, Any] | None        # resolved run config (to_dict), None when invalid
    invalid: str | None = None           # the ConfigError of an invalid run config

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.setting, self.label, self.seed)


@dataclass
class Experiment:
    """A validated experiment: the spec, the resolved directory and every run it expands to."""
    spec: ExperimentSpec
    name: str
    out_dir: Path
    base: dict[str, Any]
    runs: list[RunSpec]
    source: Path | None = None

    @property
    def labels(self) -> list[str]:
        return [m.label for m in self.spec.methods]

    @property
    def settings(self) -> list[str]:
        return list(self.spec.settings) or [DEFAULT_SETTING]

    @property
    def baseline(self) -> str:
        return self.spec.tables.baseline or self.labels[0]

    def labels_for(self, which: str) -> list[str]:
        """The method labels a table or figure shows, in the order the config gives."""
        chosen = getattr(self.spec.tables, which)
        if chosen is not None:
            return list(chosen)
        if which == "fig3":
            return [r.label for r in self.runs_of(self.settings[0])
                    if r.config and learns_graph(r.config["train"]["method"]) and r.seed == self.spec.seeds[0]]
        return self.labels

    def runs_of(self, setting: str) -> list[RunSpec]:
        return [r for r in self.runs if r.setting == setting]

    def method_of(self, label: str) -> str | None:
        """train.method of a label (from its first valid run config)."""
        for r in self.runs:
            if r.label == label and r.config:
                return r.config["train"]["method"]
        return None


def slug(text: str) -> str:
    """A file-name-safe form of a label or setting name."""
    return _SLUG.sub("_", text).strip("_") or "_"


def _error(key: str, message: str) -> ConfigError:
    return ConfigError(f"{key}: {message}")


def _labels_known(values: Sequence[str] | None, key: str, labels: list[str]) -> None:
    for i, label in enumerate(values or []):
        if label not in labels:
            raise _error(f"{key}[{i}]", f"{label!r} is not a method label; labels: {', '.join(map(repr, labels))}")


def _check_overrides(overrides: Mapping[str, Any], key: str, forbidden: Sequence[str], why: str) -> None:
    for dotted in overrides:
        if not isinstance(dotted, str) or not dotted:
            raise _error(key, f"override keys must be dotted config keys like train.method, got {dotted!r}")
        for bad in forbidden:
            if dotted == bad or dotted.startswith(bad + "."):
                raise _error(f"{key}.{dotted}", f"may not be overridden here: {why}")


def _check_sweep(sweep: SweepSpec, labels: list[str], settings: list[str]) -> None:
    """The sweep's metric is one wpultr reports, its labels are method labels, its settings exist."""
    if not re.fullmatch(r"(DCG|ERR|nDCG)@[1-9][0-9]*|MAP", sweep.metric):
        raise _error("tables.sweep.metric", f"must be DCG@k, ERR@k, nDCG@k or MAP, got {sweep.metric!r}")
    _labels_known(sweep.labels, "tables.sweep.labels", labels)
    for group, points in sweep.groups.items():
        if not points or slug(group) != group:
            raise _error(f"tables.sweep.groups.{group}", "a group needs a file-name-safe name and at least one "
                                                         "{setting: x value}")
        for setting in points:
            if setting not in settings:
                raise _error(f"tables.sweep.groups.{group}.{setting}", f"is not a setting; settings: "
                                                                        f"{', '.join(map(repr, settings))}")


def _base_values(base: Any, source: Path | None) -> dict[str, Any]:
    if base is None:
        return {}
    if isinstance(base, str):
        path = Path(base)
        if not path.is_absolute() and source is not None:
            path = source.parent / path
        if not path.is_file():
            raise _error("base", f"{base!r} is neither a mapping nor an existing run config file ({path})")
        try:
            return file_relative_paths(read_yaml_mapping(path), path.resolve().parent)
        except ConfigError as e:
            raise _error("base", str(e)) from None
    if not isinstance(base, Mapping):
        raise _error("base", f"expected a run config mapping or the path of one, got {base!r}")
    return copy.deepcopy(dict(base))


def experiment_from_dict(values: Mapping[str, Any], source: Path | None = None) -> Experiment:
    """Validate an experiment mapping and expand it into run specs; ConfigError names the key at fault."""
    if not isinstance(values, Mapping):
        raise ConfigError("experiment: top level must be a mapping of experiment keys")
    spec: ExperimentSpec = from_mapping(ExperimentSpec, values, "")
    name = spec.name or (source.stem if source else "experiment")
    if not spec.methods:
        raise _error("methods", "give at least one method: a list of {label, overrides}")
    labels: list[str] = []
    for i, method in enumerate(spec.methods):
        if not method.label:
            raise _error(f"methods[{i}].label", "every method needs a non-empty label")
        if method.label in labels:
            raise _error(f"methods[{i}].label", f"{method.label!r} is used twice; labels must be unique")
        if slug(method.label) in {slug(lab) for lab in labels}:
            raise _error(f"methods[{i}].label", f"{method.label!r} maps to the same directory name as another label")
        labels.append(method.label)
        _check_overrides(method.overrides, f"methods[{i}].overrides", PAIRED_KEYS,
                         "every method of a seed must see the same logs and test queries (use `settings`)")
    if not spec.seeds:
        raise _error("seeds", "give at least one seed, e.g. [0, 1, 2, 3, 4]")
    if len(set(spec.seeds)) != len(spec.seeds):
        raise _error("seeds", f"seeds must be distinct, got {spec.seeds}")
    for setting, overrides in spec.settings.items():
        if not setting or slug(setting) != setting:
            raise _error(f"settings.{setting}", "setting names may hold letters, digits and _ . + - only")
        _check_overrides(overrides, f"settings.{setting}", SETTING_FORBIDDEN, "set per run by the experiment")
    tables = spec.tables
    if tables.baseline is not None and tables.baseline not in labels:
        raise _error("tables.baseline", f"{tables.baseline!r} is not a method label; labels: "
                                        f"{', '.join(map(repr, labels))}")
    for which in ("table1", "table2", "table3", "fig3", "fig4", "fig5"):
        _labels_known(getattr(tables, which), f"tables.{which}", labels)
    _check_sweep(tables.sweep, labels, list(spec.settings))
    if tables.fig4_positions < 1:
        raise _error("tables.fig4_positions", f"must be >= 1, got {tables.fig4_positions}")
    if not 0.0 < spec.significance.alpha < 1.0:
        raise _error("significance.alpha", f"must be in (0, 1), got {spec.significance.alpha}")
    if spec.parallel is not None and spec.parallel < 1:
        raise _error("parallel", f"must be >= 1, got {spec.parallel}")
    try:
        out_dir = output_path(spec.out_dir.format(name=name), "out_dir").resolve()   # a file:// URL: its path
    except (KeyError, IndexError, ValueError) as e:
        raise _error("out_dir", f"{spec.out_dir!r}: only {{name}} may be substituted ({e})") from None

    base = _base_values(spec.base, source)
    try:
        config_from_dict({**base, "name": name, "run_dir": str(out_dir / "base")})
    except ConfigError as e:
        raise ConfigError(f"base: {e}") from None

    runs: list[RunSpec] = []
    settings = spec.settings or {DEFAULT_SETTING: {}}
    for setting, setting_overrides in settings.items():
        setting_values = copy.deepcopy(base)
        try:
            for dotted, value in setting_overrides.items():
                set_dotted(setting_values, dotted, copy.deepcopy(value))
            config_from_dict({**setting_values, "name": name, "run_dir": str(out_dir / "base")})
        except ConfigError as e:
            raise ConfigError(f"settings.{setting}: {e}") from None
        for i, method in enumerate(spec.methods):
            for seed in spec.seeds:
                run_dir = out_dir / "runs" / setting / slug(method.label) / f"seed_{seed}"
                values = copy.deepcopy(setting_values)
                where = f"methods[{i}] ({method.label})"
                try:
                    for dotted, value in method.overrides.items():
                        set_dotted(values, dotted, copy.deepcopy(value))
                    values.update(name=f"{name}.{setting}.{slug(method.label)}.s{seed}", seed=seed,
                                  run_dir=str(run_dir))
                    resolved = to_dict(config_from_dict(values))
                except ConfigError as e:
                    message = f"{where}: {e}"
                    if spec.on_invalid_run == "error":
                        raise ConfigError(message) from None
                    runs.append(RunSpec(setting, method.label, seed, run_dir, None, message))
                    continue
                runs.append(RunSpec(setting, method.label, seed, run_dir, resolved))
    return Experiment(spec=spec, name=name, out_dir=out_dir, base=base, runs=runs, source=source)


def _file_relative(values: dict[str, Any], base: Path) -> None:
    """Relative paths written in the experiment file (an inline `base`, the settings' and methods' overrides)
    are relative to the file, as in a run config file (`config.file_relative_paths`)."""
    if isinstance(values.get("base"), dict):
        file_relative_paths(values["base"], base)
    settings = values.get("settings")
    blocks = list(settings.values()) if isinstance(settings, dict) else []
    blocks += [m.get("overrides") for m in values.get("methods") or [] if isinstance(m, dict)]
    for block in (b for b in blocks if isinstance(b, dict)):
        for dotted in (set(PATH_KEYS) - {"run_dir"}) & set(block):
            nested: dict[str, Any] = {}
            set_dotted(nested, dotted, block[dotted])
            node: Any = file_relative_paths(nested, base)
            for part in dotted.split("."):
                node = node[part]
            block[dotted] = node


def load_experiment(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Experiment:
    """Read an experiment YAML (safe loader); `overrides` are dotted keys over it (``base.train.epochs``).
    Relative paths in the file are relative to the file's directory; in `overrides`, to the working one."""
    path = Path(path)
    values = read_yaml_mapping(path, "experiment")
    _file_relative(values, path.resolve().parent)
    for dotted, value in (overrides or {}).items():
        if dotted.startswith("base.") and isinstance(values.get("base"), str):
            values["base"] = _base_values(values["base"], path)
        set_dotted(values, dotted, value)
    try:
        return experiment_from_dict(values, source=path)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


@dataclass
class RunRecord:
    setting: str
    label: str
    seed: int
    run_dir: str
    status: Literal["ok", "done", "failed", "invalid"]   # done: finished earlier, skipped now
    seconds: float | None = None
    error: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status in ("ok", "done")
