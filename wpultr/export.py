"""Shipping a retrained ranker: `export_run` copies it out of a run, `score_table` scores new tables with it.

An exported model directory holds the ranker (config.json + model.safetensors), the lexical
feature state when the ranker reads features computed from token ids (lexical/: JSON + NPZ), and
export.json (where it came from: run, method, seed, metrics, versions, and the sha256 of every other
file of the export under `checksums`). Loading reads JSON, safetensors and pickle-free NPZ only, and
checks everything first (`load_export`): only a complete export (export.json with the checksum of every file, each
matching) or a run's own ranker/ (its run directory's marker beside it) is loaded; a directory that is incomplete,
tampered with (a file whose checksum differs, a file export.json does not list, export.json gone), holding a symlink
or of another format version is one ExportError, never a traceback.
`export_run` reads a run directory and writes the export at a local path or an fsspec URL alike (a file:// URL is
the local path it names, `..` resolved); an `--out` that exists is replaced only when it is an earlier export whose
export.json lists every file there with its present sha256 (`EXPORT`), never a run or a user's files.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .config import read_yaml_mapping
from .errors import ConfigError, ExportError, SchemaError
from .features.lexical import STATE_JSON, STATE_NPZ, LexicalFeaturizer
from .io.baidu import read_baidu_annotations
from .io.parquet import read_table
from .rankers.base import CONFIG_FILE, WEIGHTS_FILE, read_json_bounded, score_frame
from .rankers.registry import load_ranker
from .rundir import layout as L
from .rundir.files import Replaces, atomic_path, file_sha256, holds_only, is_run_dir, read_json
from .rundir.layout import LEXICAL_STATE, RANKER_DIR
from .rundir.ownership import local_path_of
from .schema import DOC_ID, FEATURES, POSITION, QUERY_ID, QUERY_TOKENS, SESSION_ID, TITLE_TOKENS
from .storage import check_url, is_url, normalised, readable_dir, readable_run_dir, upload_dir

EXPORT_FILE = "export.json"
LEXICAL_DIR = "lexical"
EXPORT_FORMAT = "wpultr.export/1"
MAX_EXPORT_JSON_BYTES = 64 << 20      # export.json: the run's config, metrics and bias summary
MAX_LEXICAL_BYTES = 2 << 30           # lexical/: per-token collection statistics
KEY_COLUMNS = (SESSION_ID, QUERY_ID, POSITION, DOC_ID, "label", "bucket")
SCORE = "score"
CHECKSUMS = "checksums"               # export.json: {relative path: sha256 hex} of every other file
COMMAND = "wpultr export"             # export.json: the command that wrote it
_SHA256_HEX = frozenset("0123456789abcdef")


def export_run(run_dir: str | Path, out: str | Path) -> str | Path:
    """Copy a finished run's ranker (and its feature state) to `out`, with its provenance in export.json;
    the copy is checked as `wpultr score` will load it before it is renamed into place.

    Either may be an fsspec URL: a run directory at a URL is read from its pulled reader copy
    (storage.readable_run_dir), and an export to a URL is written to a local temporary directory, checked,
    then uploaded (storage.upload_dir: export.json last; an earlier export there is replaced, anything else
    is refused). Returns `out` (a Path, or the URL as given).
    """
    if is_url(out) and local_path_of(str(out)) is not None:     # file://: the local directory it names
        _export_local(run_dir, local_path_of(str(out)))
        return out
    if is_url(out):
        out = normalised(str(out))
        check_url(str(out), "--out")
        with tempfile.TemporaryDirectory(prefix="wpultr-export-") as tmp:
            staged = _export_local(run_dir, Path(tmp) / "model")
            upload_dir(staged, str(out), "--out", EXPORT_FILE)
        return out
    return _export_local(run_dir, Path(out))


def _export_local(run_dir: str | Path, out: Path) -> Path:
    """`export_run` into the local directory `out`."""
    source = str(run_dir).rstrip("/") if is_url(run_dir) else None
    with readable_run_dir(run_dir, "RUN_DIR", include=(L.RANKER_DIR, L.LEXICAL_STATE, L.METRICS,
                                                       L.VERSIONS_FILE, L.BIAS, L.CONFIG_FILE)) as run:
        ranker = run / L.RANKER_DIR
        if not (ranker / CONFIG_FILE).is_file():
            raise ExportError(f"{run}: no trained ranker in {L.RANKER_DIR}/ (has the run finished?)")
        with atomic_path(out, EXPORT, inputs=(run_dir,), key="--out") as tmp:
            _copy_tree(ranker, tmp)
            lexical = run / L.LEXICAL_STATE
            if lexical.is_dir():
                _copy_tree(lexical, tmp / LEXICAL_DIR)
            manifest: dict[str, Any] = {"format": EXPORT_FORMAT, "command": COMMAND,
                                        "source_run": source or str(run.resolve())}
            for key, rel in (("metrics", L.METRICS), ("versions", L.VERSIONS_FILE), ("bias", L.BIAS)):
                if (run / rel).exists():
                    manifest[key] = read_json(run / rel)
            config = run / L.CONFIG_FILE
            if config.exists():
                resolved = read_yaml_mapping(config, "run config")   # bounded: an alias bomb or a tag is one line
                train = resolved.get("train")
                manifest.update(method=train.get("method") if isinstance(train, dict) else None,
                                seed=resolved.get("seed"), config=resolved)
            manifest[CHECKSUMS] = export_checksums(tmp)
            (tmp / EXPORT_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
            load_export(tmp)
    return out


def _copy_tree(source: Path, target: Path) -> None:
    """Copy the plain files and directories under `source` to `target`, one file at a time, so a failed write (disk
    full) is one OSError naming its file, never shutil.Error's list; a symlink there is an ExportError."""
    target.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(source):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise ExportError(f"{path}: a symlink or special file in the run's ranker; an export holds plain "
                                  f"files only")
            out = target / path.relative_to(source)
            if path.is_dir():
                out.mkdir(exist_ok=True)
            else:
                shutil.copyfile(path, out)


def export_checksums(directory: Path) -> dict[str, str]:
    """The sha256 of every file under an export `directory` but export.json, by relative POSIX path."""
    return {rel: file_sha256(directory / rel) for rel in _files_of(directory)}


def _files_of(directory: Path) -> list[str]:
    """The relative POSIX paths of the files under an export `directory`, export.json itself left out."""
    return sorted(rel for rel in (p.relative_to(directory).as_posix() for p in directory.rglob("*")
                                  if p.is_file()) if rel != EXPORT_FILE)


def _symlink_in(directory: Path) -> Path | None:
    """The first symlink (or other non-plain entry) under `directory` (itself may be a link the user made to it),
    walked without following links."""
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                return path
    return None


def is_export_dir(path: Path) -> bool:
    """`path` is an earlier export whole: its export.json (this format) lists every other file there with the sha256
    it has now, and nothing else (no symlink) lies there. What `export --out` may replace."""
    if not path.is_dir() or path.is_symlink() or _symlink_in(path) is not None:
        return False
    try:
        if (path / EXPORT_FILE).stat().st_size > MAX_EXPORT_JSON_BYTES:
            return False
        manifest = json.loads((path / EXPORT_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return False
    listed = manifest.get(CHECKSUMS) if isinstance(manifest, dict) and manifest.get("format") == EXPORT_FORMAT \
        else None
    if not isinstance(listed, dict) or set(listed) != set(_files_of(path)) \
            or not holds_only(path, ({*listed, EXPORT_FILE}).__contains__):
        return False
    return all(isinstance(digest, str) and file_sha256(path / rel) == digest for rel, digest in listed.items())


EXPORT = Replaces(f"an earlier wpultr export (a directory holding {EXPORT_FILE} and only the files it lists, each "
                  f"with the sha256 it lists)", is_export_dir)


@dataclass
class ExportedModel:
    """A loaded export: the ranker and, when it reads lexical features, the featurizer that computes them."""

    ranker: Any                 # wpultr.rankers.base.Ranker
    lexical: Any | None         # wpultr.features.lexical.LexicalFeaturizer
    manifest: dict[str, Any]


def load_export(model_dir: str | Path) -> ExportedModel:
    """An exported ranker (or a run's ranker/ directory), every file checked: format versions, checksums,
    config fields, weights against the config, the lexical state against the ranker's input width.

    `model_dir` may be a file:// URL (read in place) or another fsspec URL (pulled into a local reader copy).
    A run's ranker/ reads its lexical state from the run (data/featured/), as the run did.
    """
    with _local_model(model_dir) as local:
        return _load_local(local)


@contextlib.contextmanager
def _local_model(model_dir: str | Path) -> Iterator[Path]:
    """The model directory as a local path: a URL's files read through `storage.readable_dir`."""
    if not is_url(model_dir):
        yield Path(model_dir)
        return
    with readable_dir(str(model_dir), "MODEL", marker=CONFIG_FILE,
                      what="an exported ranker (wpultr export) or a run's ranker/ directory") as local:
        yield local


def _load_local(model_dir: Path) -> ExportedModel:
    if not model_dir.is_dir():
        raise ExportError(f"{model_dir}: no such directory; expected an exported ranker (wpultr export) or a "
                          f"run's ranker/ directory, as a local path or a URL (file://, s3://, …)")
    link = _symlink_in(model_dir)
    if link is not None:
        raise ExportError(f"{link}: a symlink (or special file) inside the model directory; an export holds plain "
                          f"files only, each checked against export.json. Export the run again")
    manifest: dict[str, Any] = {}
    if not (model_dir / EXPORT_FILE).exists() and not _is_run_ranker(model_dir):
        raise ExportError(f"{model_dir}: no {EXPORT_FILE}; expected a complete export (wpultr export writes "
                          f"{EXPORT_FILE} with the sha256 of every file) or the ranker/ directory of a run directory "
                          f"(its .wpultr-run marker beside it)")
    if (model_dir / EXPORT_FILE).exists():
        manifest = read_json_bounded(model_dir / EXPORT_FILE, MAX_EXPORT_JSON_BYTES, "expected export.json")
        if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
            raise ExportError(f"{model_dir / EXPORT_FILE}: format {found!r:.80}, expected {EXPORT_FORMAT!r} "
                              f"(exported by another wpultr version, or not a wpultr export)")
        _verify_checksums(model_dir, manifest.get(CHECKSUMS))
    ranker = load_ranker(model_dir)
    lexical_dir = _lexical_dir(model_dir)
    lexical = _load_lexical(lexical_dir) if lexical_dir is not None else None
    if lexical is not None:
        width = len(lexical.feature_names_)
        if getattr(ranker, "n_features", None) != width:
            raise ExportError(f"{lexical_dir}: computes {width} lexical features, but the "
                              f"{ranker.kind} ranker reads {getattr(ranker, 'n_features', 'no feature vector')}")
    return ExportedModel(ranker, lexical, manifest)


def _is_run_ranker(model_dir: Path) -> bool:
    """`model_dir` is a run's own ranker/: named so, in a directory that carries the run marker."""
    real = model_dir.resolve()
    return real.name == RANKER_DIR and is_run_dir(real.parent)


def _lexical_dir(model_dir: Path) -> Path | None:
    """Where the ranker's lexical feature state is: the export's lexical/, or, for a run's own ranker/, the
    run's data/featured state (export copies it from there); None when the ranker reads no lexical features."""
    if (model_dir / LEXICAL_DIR).exists():
        return model_dir / LEXICAL_DIR
    run = model_dir.resolve().parent
    if model_dir.resolve().name == RANKER_DIR and is_run_dir(run) and (run / LEXICAL_STATE).exists():
        return run / LEXICAL_STATE
    return None


def _verify_checksums(model_dir: Path, checksums: Any) -> None:
    """Every file of the export is listed in export.json with its sha256 and matches it (ExportError naming
    the file otherwise); an export.json without checksums (an incomplete export, or one written before them) is
    refused: nothing of it could be verified."""
    if checksums is None:
        raise ExportError(f"{model_dir / EXPORT_FILE}: lists no {CHECKSUMS} (an incomplete export, or one written "
                          f"by an earlier wpultr); nothing of it can be verified. Export the run again")
    if not isinstance(checksums, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 64 and set(v) <= _SHA256_HEX
            for k, v in checksums.items()):
        raise ExportError(f"{model_dir / EXPORT_FILE}: {CHECKSUMS!r} is not a mapping of file names to sha256 "
                          f"hex digests")
    files = set(_files_of(model_dir))
    unlisted = sorted(files - set(checksums))
    if unlisted:
        raise ExportError(f"{model_dir / unlisted[0]}: not part of the export ({EXPORT_FILE} lists no checksum for "
                          f"it); remove it, or export again")
    for rel, want in sorted(checksums.items()):
        path = model_dir / rel
        if rel not in files:
            raise ExportError(f"{path}: missing, or not a file ({EXPORT_FILE} lists it)")
        if file_sha256(path) != want:
            raise ExportError(f"{path}: its sha256 differs from the one in {EXPORT_FILE}: the file was changed or "
                              f"damaged after export")


def _load_lexical(directory: Path):
    """The lexical featurizer of an export, its files bounded in size; any failure to read it is an ExportError."""
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
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_dir() or path.suffix == ".parquet":
        try:
            return read_table(path)
        except (pa.ArrowException, OSError) as error:
            raise SchemaError(f"{path}: not a readable Parquet table ({type(error).__name__}: "
                              f"{str(error)[:160]})") from None
    table, bad = read_baidu_annotations(path)
    if len(bad):
        print(f"{path}: {len(bad)} malformed annotation lines set aside", file=sys.stderr)
    return table


def score_table(model_dir: str | Path, table: pd.DataFrame, batch_size: int = 1024) -> pd.DataFrame:
    """Score every row of `table` with an exported (or run) ranker: key columns plus `score`.

    An export with lexical state computes the ranker's features from the token ids, as the run did.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"--batch-size: must be an integer >= 1, got {batch_size!r}")
    model = load_export(model_dir)
    if model.lexical is not None and FEATURES not in table.columns:
        missing = [c for c in (QUERY_TOKENS, TITLE_TOKENS) if c not in table.columns]
        if missing:
            raise SchemaError(f"this ranker reads lexical features computed from token ids; the table lacks "
                              f"{missing} (present: {list(table.columns)})")
        table = table.assign(**{FEATURES: list(model.lexical.transform(table))})
    scores = score_frame(model.ranker, table, batch_size)
    _check_finite(scores, model_dir)
    keys = [c for c in KEY_COLUMNS if c in table.columns]
    return table[keys].assign(**{SCORE: scores}).reset_index(drop=True)


def _check_finite(scores: np.ndarray, model_dir: str | Path) -> None:
    """ExportError naming the weights when the ranker gives a score that is nan or ±inf (weights so large
    that the forward pass overflows): such scores rank nothing."""
    bad = np.flatnonzero(~np.isfinite(scores))
    if len(bad):
        raise ExportError(f"{str(model_dir).rstrip('/')}/{WEIGHTS_FILE}: the ranker gives non-finite scores for "
                          f"{len(bad)} of {len(scores)} rows (row {bad[0]}: {scores[bad[0]]}); its weights are out "
                          f"of range or damaged")
