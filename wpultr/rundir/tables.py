"""Which of a run directory's tables a stage reads: the featured sessions and annotations when the featurize
stage wrote them, the ingested ones otherwise; and the columns the ingest recorded."""
from __future__ import annotations

from pathlib import Path

from .files import RunDir, read_json
from .layout import ANNOTATIONS, FEATURED_ANNOTATIONS, FEATURED_SESSIONS_DIR, INGEST_SUMMARY, SESSIONS_DIR


def training_tables(run: RunDir) -> tuple[Path, Path]:
    """(sessions directory, annotations file) the train, split, discover and evaluate stages read."""
    if run.path(FEATURED_SESSIONS_DIR).exists():
        return run.path(FEATURED_SESSIONS_DIR), run.path(FEATURED_ANNOTATIONS)
    return run.path(SESSIONS_DIR), run.path(ANNOTATIONS)


def ingested_columns(run: RunDir) -> list[str]:
    """The sessions table's columns as the ingest stage recorded them (data/ingest.json, from the Parquet footers)."""
    return list(read_json(run.path(INGEST_SUMMARY)).get("columns", []))
