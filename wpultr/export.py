"""Shipping a retrained ranker: `export_run` copies it out of a run, `score_table` scores new tables with it.

An exported model directory holds the ranker (config.json + model.safetensors), the lexical
feature state when the ranker reads features computed from token ids (lexical.json), and
export.json (where it came from: run, method, seed, metrics, versions). Loading reads JSON and
safetensors only: nothing is unpickled.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from .pipeline.rundir import atomic_path, read_json
from .schema import FEATURES, POSITION, QUERY_ID, SESSION_ID, DOC_ID

EXPORT_FILE = "export.json"
LEXICAL_FILE = "lexical.json"
EXPORT_FORMAT = "wpultr.export/1"
KEY_COLUMNS = (SESSION_ID, QUERY_ID, POSITION, DOC_ID, "label", "bucket")


def export_run(run_dir: str | Path, out: str | Path) -> Path:
    """Copy a finished run's ranker (and its feature state) to `out`, with its provenance in export.json."""
    from .pipeline import stages as S
    run_dir, out = Path(run_dir), Path(out)
    ranker = run_dir / S.RANKER_DIR
    if not (ranker / "config.json").is_file():
        raise FileNotFoundError(f"{run_dir}: no trained ranker in {S.RANKER_DIR}/ (has the run finished?)")
    with atomic_path(out) as tmp:
        shutil.copytree(ranker, tmp)
        lexical = run_dir / S.LEXICAL_STATE
        if lexical.exists():
            shutil.copy(lexical, tmp / LEXICAL_FILE)
        manifest: dict[str, Any] = {"format": EXPORT_FORMAT, "source_run": str(run_dir.resolve())}
        for key, rel in (("metrics", S.METRICS), ("versions", "versions.json"), ("bias", S.BIAS)):
            if (run_dir / rel).exists():
                manifest[key] = read_json(run_dir / rel)
        config = run_dir / "config.yaml"
        if config.exists():
            import yaml
            resolved = yaml.safe_load(config.read_text())
            manifest.update(method=resolved["train"]["method"], seed=resolved["seed"], config=resolved)
        (tmp / EXPORT_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return out


def read_input_table(path: str | Path) -> pd.DataFrame:
    """A Parquet table (file or partition directory), or a Baidu annotation file (tab-separated, gzip or not)."""
    from .io.parquet import read_table
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_dir() or path.suffix == ".parquet":
        return read_table(path)
    from .io.baidu import read_baidu_annotations
    table, bad = read_baidu_annotations(path)
    if len(bad):
        import sys
        print(f"{path}: {len(bad)} malformed annotation lines set aside", file=sys.stderr)
    return table


def score_table(model_dir: str | Path, table: pd.DataFrame, batch_size: int = 1024) -> pd.DataFrame:
    """Score every row of `table` with an exported (or run) ranker: key columns plus `score`."""
    from .rankers.base import load_ranker, score_frame
    model_dir = Path(model_dir)
    ranker = load_ranker(model_dir)
    lexical = model_dir / LEXICAL_FILE
    if lexical.exists() and FEATURES not in table.columns:
        from .features.lexical import LexicalFeaturizer
        table = table.assign(**{FEATURES: list(LexicalFeaturizer.load(lexical).transform(table))})
    keys = [c for c in KEY_COLUMNS if c in table.columns]
    return table[keys].assign(score=score_frame(ranker, table, batch_size)).reset_index(drop=True)
