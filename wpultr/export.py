"""Shipping a retrained ranker: `export_run` copies it out of a run, `score_table` scores new tables with it.

An exported model directory holds the ranker (config.json + model.safetensors), the lexical
feature state when the ranker reads features computed from token ids (lexical/: JSON + NPZ), and
export.json (where it came from: run, method, seed, metrics, versions). Loading reads JSON,
safetensors and pickle-free NPZ only, and checks everything first (`load_export`): a directory that
is incomplete, tampered with or of another format version is one ExportError, never a traceback.
`export_run` reads a run directory and writes the export at a local path or an fsspec URL alike.
"""
from __future__ import annotations

import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import ConfigError, ExportError, SchemaError
from .pipeline.rundir import atomic_path, read_json
from .schema import DOC_ID, FEATURES, POSITION, QUERY_ID, QUERY_TOKENS, SESSION_ID, TITLE_TOKENS

EXPORT_FILE = "export.json"
LEXICAL_DIR = "lexical"
EXPORT_FORMAT = "wpultr.export/1"
MAX_EXPORT_JSON_BYTES = 64 << 20      # export.json: the run's config, metrics and bias summary
MAX_LEXICAL_BYTES = 2 << 30           # lexical/: per-token collection statistics
KEY_COLUMNS = (SESSION_ID, QUERY_ID, POSITION, DOC_ID, "label", "bucket")


def export_run(run_dir: str | Path, out: str | Path) -> str | Path:
    """Copy a finished run's ranker (and its feature state) to `out`, with its provenance in export.json;
    the copy is checked as `wpultr score` will load it before it is renamed into place.

    Either may be an fsspec URL: a run directory at a URL is read from its pulled reader copy
    (storage.readable_run_dir), and an export to a URL is written to a local temporary directory, checked,
    then uploaded (storage.upload_dir: export.json last; an earlier export there is replaced, anything else
    is refused). Returns `out` (a Path, or the URL as given).
    """
    from .storage import check_url, is_url, upload_dir
    if is_url(out):
        check_url(str(out), "--out")
        import tempfile
        with tempfile.TemporaryDirectory(prefix="wpultr-export-") as tmp:
            staged = _export_local(run_dir, Path(tmp) / "model")
            upload_dir(staged, str(out), "--out", EXPORT_FILE)
        return out
    return _export_local(run_dir, Path(out))


def _export_local(run_dir: str | Path, out: Path) -> Path:
    """`export_run` into the local directory `out`."""
    from .pipeline import layout as L
    from .rankers.base import CONFIG_FILE
    from .storage import is_url, readable_run_dir
    source = str(run_dir).rstrip("/") if is_url(run_dir) else None
    with readable_run_dir(run_dir, "RUN_DIR", include=(L.RANKER_DIR, L.LEXICAL_STATE, L.METRICS,
                                                       L.VERSIONS_FILE, L.BIAS, L.CONFIG_FILE)) as run:
        ranker = run / L.RANKER_DIR
        if not (ranker / CONFIG_FILE).is_file():
            raise ExportError(f"{run}: no trained ranker in {L.RANKER_DIR}/ (has the run finished?)")
        with atomic_path(out) as tmp:
            shutil.copytree(ranker, tmp)
            lexical = run / L.LEXICAL_STATE
            if lexical.is_dir():
                shutil.copytree(lexical, tmp / LEXICAL_DIR)
            manifest: dict[str, Any] = {"format": EXPORT_FORMAT, "source_run": source or str(run.resolve())}
            for key, rel in (("metrics", L.METRICS), ("versions", L.VERSIONS_FILE), ("bias", L.BIAS)):
                if (run / rel).exists():
                    manifest[key] = read_json(run / rel)
            config = run / L.CONFIG_FILE
            if config.exists():
                import yaml
                resolved = yaml.safe_load(config.read_text())
                manifest.update(method=resolved["train"]["method"], seed=resolved["seed"], config=resolved)
            (tmp / EXPORT_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
            load_export(tmp)
    return out


@dataclass
class ExportedModel:
    """A loaded export: the ranker and, when it reads lexical features, the featurizer that computes them."""

    ranker: Any                 # wpultr.rankers.base.Ranker
    lexical: Any | None         # wpultr.features.lexical.LexicalFeaturizer
    manifest: dict[str, Any]


def load_export(model_dir: str | Path) -> ExportedModel:
    """An exported ranker (or a run's ranker/ directory), every file checked: format versions, config
    fields, weights against the config, the lexical state against the ranker's input width."""
    from .rankers.base import read_json_bounded
    from .rankers.registry import load_ranker
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ExportError(f"{model_dir}: no such directory; expected an exported ranker (wpultr export) or a "
                          f"run's ranker/ directory")
    manifest: dict[str, Any] = {}
    if (model_dir / EXPORT_FILE).exists():
        manifest = read_json_bounded(model_dir / EXPORT_FILE, MAX_EXPORT_JSON_BYTES, "expected export.json")
        if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
            raise ExportError(f"{model_dir / EXPORT_FILE}: format {found!r:.80}, expected {EXPORT_FORMAT!r} "
                              f"(exported by another wpultr version, or not a wpultr export)")
    ranker = load_ranker(model_dir)
    lexical = _load_lexical(model_dir / LEXICAL_DIR) if (model_dir / LEXICAL_DIR).exists() else None
    if lexical is not None:
        width = len(lexical.feature_names_)
        if getattr(ranker, "n_features", None) != width:
            raise ExportError(f"{model_dir / LEXICAL_DIR}: computes {width} lexical features, but the "
                              f"{ranker.kind} ranker reads {getattr(ranker, 'n_features', 'no feature vector')}")
    return ExportedModel(ranker, lexical, manifest)


def _load_lexical(directory: Path):
    """The lexical featurizer of an export, its files bounded in size; any failure to read it is an ExportError."""
    from .features.lexical import STATE_JSON, STATE_NPZ, LexicalFeaturizer
    if not directory.is_dir():
        raise ExportError(f"{directory}: not a directory; expected the lexical feature state ({STATE_JSON} + "
                          f"{STATE_NPZ})")
    for name in (STATE_JSON, STATE_NPZ):
        path = directory / name
        if not path.is_file():
            raise ExportError(f"{path}: missing; expected the lexical feature state")
        if path.stat().st_size > MAX_LEXICAL_BYTES:
            raise ExportError(f"{path}: {path.stat().st_size} bytes, more than the {MAX_LEXICAL_BYTES} allowed")
    try:
        with zipfile.ZipFile(directory / STATE_NPZ) as archive:      # an NPZ is a zip: bound what it unpacks to
            unpacked = sum(entry.file_size for entry in archive.infolist())
        if unpacked > MAX_LEXICAL_BYTES:
            raise ValueError(f"{STATE_NPZ} unpacks to {unpacked} bytes, more than the {MAX_LEXICAL_BYTES} allowed")
        featurizer = LexicalFeaturizer.load(directory)
        featurizer._check_params()
        for field, stats in featurizer.field_stats_.items():
            _check_statistics(field, stats)
        if featurizer.n_documents_ < 0:
            raise ValueError(f"n_documents is {featurizer.n_documents_}, expected >= 0")
        return featurizer
    except Exception as error:  # a tampered state fails in many ways (JSON, zip, keys, types): all one error
        detail = str(error).strip().splitlines()[0][:160] if str(error).strip() else "no detail"
        raise ExportError(f"{directory}: unreadable lexical feature state ({type(error).__name__}: {detail})") from None


def _check_statistics(field: str, stats: Any) -> None:
    """One field's collection statistics as `transform` needs them: equal-length integer vectors, ids
    strictly increasing (they are binary-searched), counts and total length non-negative."""
    arrays = {name: np.asarray(getattr(stats, name)) for name in ("token_ids", "doc_freq", "coll_freq")}
    for name, array in arrays.items():
        if array.ndim != 1 or array.dtype.kind not in "iu" or len(array) != len(arrays["token_ids"]):
            raise ValueError(f"field {field!r}: {name} is a {array.dtype} array of shape {array.shape}, expected "
                             f"{len(arrays['token_ids'])} integers")
    if (np.diff(arrays["token_ids"]) <= 0).any():
        raise ValueError(f"field {field!r}: token_ids are not strictly increasing")
    if (arrays["doc_freq"] < 0).any() or (arrays["coll_freq"] < 0).any() or stats.total_length < 0:
        raise ValueError(f"field {field!r}: negative counts")


def read_input_table(path: str | Path) -> pd.DataFrame:
    """A Parquet table (file or partition directory), or a Baidu annotation file (tab-separated, gzip or not)."""
    from .io.parquet import read_table
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_dir() or path.suffix == ".parquet":
        import pyarrow as pa
        try:
            return read_table(path)
        except (pa.ArrowException, OSError) as error:
            raise SchemaError(f"{path}: not a readable Parquet table ({type(error).__name__}: "
                              f"{str(error)[:160]})") from None
    from .io.baidu import read_baidu_annotations
    table, bad = read_baidu_annotations(path)
    if len(bad):
        import sys
        print(f"{path}: {len(bad)} malformed annotation lines set aside", file=sys.stderr)
    return table


def score_table(model_dir: str | Path, table: pd.DataFrame, batch_size: int = 1024) -> pd.DataFrame:
    """Score every row of `table` with an exported (or run) ranker: key columns plus `score`.

    An export with lexical state computes the ranker's features from the token ids, as the run did.
    """
    from .rankers.base import score_frame
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"--batch-size: must be an integer >= 1, got {batch_size!r}")
    model = load_export(model_dir)
    if model.lexical is not None and FEATURES not in table.columns:
        missing = [c for c in (QUERY_TOKENS, TITLE_TOKENS) if c not in table.columns]
        if missing:
            raise SchemaError(f"this ranker reads lexical features computed from token ids; the table lacks "
                              f"{missing} (present: {list(table.columns)})")
        table = table.assign(**{FEATURES: list(model.lexical.transform(table))})
    keys = [c for c in KEY_COLUMNS if c in table.columns]
    return table[keys].assign(score=score_frame(model.ranker, table, batch_size)).reset_index(drop=True)
