"""The Python API for notebooks, and the one code path the CLI's `run`, `export` and `score` go through:

    import wpultr
    run = wpultr.run("pipelines/bal.yaml", name="bal-nb", train__epochs=2)   # or {"train.epochs": 2}
    run.metrics["all"]["DCG@10"], run.shipped["label"]                      # metrics.json; the shipped epoch
    run.graph().edges                                                       # the shipped epoch's causal graph
    wpultr.load_ranker(run.export("model/")).score(table)                   # one score per row

`wpultr.run` runs (or resumes) the pipeline a config describes, exactly as `wpultr run` does, and returns a `Run`;
`wpultr.open_run(path)` opens a finished one. Everything a `Run` answers is read from its directory.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .causal.graph import graph_epochs, load_epoch_graph
from .cli_support import nest
from .errors import RunDirError
from .report.verdict import verdict
from .rundir.epochs import history_entries, shipped, shipped_graph_epoch
from .rundir.files import read_json
from .rundir.layout import MARKER, METRICS, RANKER_DIR

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from .causal.graph import DiscoveredGraph
    from .config import RunConfig
    from .report.verdict import Verdict


def _overrides(sets: Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted overrides: `sets` as given ({"train.epochs": 2}), keywords with `__` for the dots (train__epochs=2)."""
    out = dict(sets or {})
    out.update({key.replace("__", "."): value for key, value in keywords.items()})
    return out


def _merge(base: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) \
            else value
    return out


def config(config: str | Path | Mapping[str, Any] | RunConfig, sets: Mapping[str, Any] | None = None,
           **overrides: Any) -> RunConfig:
    """A validated run config from a YAML file, a dict of sections or a RunConfig, with dotted overrides."""
    from .config import RunConfig, config_from_dict, load_config, to_dict  # lazy: +0.9 s (pandas, pyarrow)
    changes = _overrides(sets, overrides)
    if isinstance(config, RunConfig):
        config = to_dict(config)
    if isinstance(config, Mapping):
        return config_from_dict(_merge(dict(config), nest(changes)))
    return load_config(Path(config), changes)


def run(config_: str | Path | Mapping[str, Any] | RunConfig, *, fresh: bool = False, progress: bool = False,
        client: Any = None, sets: Mapping[str, Any] | None = None, **overrides: Any) -> Run:
    """Run (or resume) the pipeline `config_` describes (a YAML path, a dict or a RunConfig) with `overrides`
    (`train__epochs=2` or `sets={"train.epochs": 2}`); the finished `Run`. `client`: an existing Dask client."""
    from .pipeline.runner import run_pipeline  # lazy: +0.9 s (pandas, pyarrow)
    cfg = config(config_, sets, **overrides)
    result = run_pipeline(cfg, fresh=fresh, client=client, progress=progress)
    return Run(result.run_dir, url=result.url)


def open_run(path: str | Path) -> Run:
    """A finished (or partly finished) run directory; RunDirError when `path` holds no wpultr run."""
    if not (Path(path) / MARKER).is_file():
        raise RunDirError(f"{path}: not a wpultr run directory (no {MARKER} marker)")
    return Run(Path(path))


class Run:
    """A run directory and what it holds: metrics, history, the shipped epoch, graphs, the verdict, the ranker."""

    def __init__(self, path: str | Path, url: str | None = None):
        self.path = Path(path)
        self.url = url

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    def _json(self, rel: str) -> Any:
        file = self.path / rel
        return read_json(file) if file.exists() else None

    @property
    def metrics(self) -> dict[str, Any]:
        """metrics.json: DCG/ERR/nDCG@k and MAP by query group (all/high/tail), click metrics, truth metrics."""
        return self._json(METRICS) or {}

    @property
    def history(self) -> list[dict[str, Any]]:
        """The training epochs in the one numbering (warm-up named, the method's epochs 0…N−1)."""
        return history_entries(self.path)

    @property
    def shipped(self) -> dict[str, Any] | None:
        """Which epoch's ranker was shipped and why (epoch, label, metric, value, why)."""
        return shipped(self.path)

    def graph(self, epoch: int | None = None) -> DiscoveredGraph:
        """The causal graph of `epoch` (default: the shipped epoch's, else the latest)."""
        if epoch is None:
            chosen = shipped_graph_epoch(self.path)
            epoch = chosen if chosen in graph_epochs(self.path) else None
        return load_epoch_graph(self.path, epoch)[1]

    def verdict(self, baseline: str | Path | Run | None = None) -> Verdict:
        """What the run found and whether to ship it; `baseline`: a run to test the ranker against."""
        base = baseline.path if isinstance(baseline, Run) else baseline
        return verdict(self.path, None if base is None else str(base))

    def export(self, out: str | Path) -> str | Path:
        """Write the ranker as safetensors + config (+ feature state) to `out`; returns `out`."""
        return export(self.url or self.path, out)

    def ranker(self) -> Ranker:
        """The run's trained ranker, ready to score tables."""
        return load_ranker(self.path / RANKER_DIR)


def export(run_dir: str | Path, out: str | Path) -> str | Path:
    """`wpultr export`: a finished run's ranker to `out` (paths or fsspec URLs)."""
    from .export import export_run  # lazy: +0.9 s (pandas, pyarrow)
    return export_run(run_dir, out)


class Ranker:
    """A saved ranker (an export, or a run's ranker/ directory): `score(table)` gives one score per row."""

    def __init__(self, path: str | Path):
        from .export import load_export  # lazy: +0.9 s (pandas, pyarrow)
        self.path = path
        load_export(path)            # checked now (checksums, sizes, finite weights), not at the first score

    def __repr__(self) -> str:
        return f"Ranker({str(self.path)!r})"

    def score(self, table: pd.DataFrame | str | Path, batch_size: int = 1024) -> np.ndarray:
        """Scores of the rows of `table` (a DataFrame, or a Parquet/CSV/Baidu annotation file), in row order."""
        from .export import SCORE  # lazy: +0.9 s (pandas, pyarrow)
        return self.score_table(table, batch_size)[SCORE].to_numpy()

    def score_table(self, table: pd.DataFrame | str | Path, batch_size: int = 1024) -> pd.DataFrame:
        """The key columns of `table` plus `score` (what `wpultr score` writes)."""
        from .export import score_table  # lazy: +0.9 s (pandas, pyarrow)
        if not hasattr(table, "columns"):
            table = read_scoring_table(table)
        return score_table(self.path, table, batch_size)


def load_ranker(path: str | Path) -> Ranker:
    """An exported ranker (`wpultr export`, `Run.export`) or a run's ranker/ directory, checked before use."""
    return Ranker(path)


def read_scoring_table(path: str | Path) -> pd.DataFrame:
    """What `wpultr score` reads: a Parquet table, a CSV table (vectors as space-separated numbers), or a Baidu
    annotation file."""
    from .export import read_input_table  # lazy: +0.9 s (pandas, pyarrow)
    from .io.tables import CSV_SUFFIXES, read_table_file  # lazy: +0.9 s (pandas, pyarrow)
    if str(path).lower().endswith(CSV_SUFFIXES):
        return read_table_file(path)
    return read_input_table(path)
