"""BAL's streamed preparation for the train stage (`train.streaming`, out of core): the identifiability pre-flight on
the columns it checks, read from the partitions (text ids as codes) and then let go; BAL's rows built from the
partitions a few columns at a time and spilled to local disk (`BAL.fit_streamed`); the ranker's features streamed.
The train stage finds it through BAL's MethodSpec (`streamed_fit`)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import ConfigError
from ..identifiability.preflight import bias_factors, preflight
from ..schema import CLICK, DOC_ID, POSITION, QUERY_ID, SESSION_ID
from .method import BAL

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..methods.base import FitResult


def fit_streamed(sessions_path: Path, valid: pd.DataFrame | None, cfg: RunConfig,
                 run_root: Path) -> tuple[FitResult, dict[str, Any]]:
    """(BAL's fit on the partitions at `sessions_path`, the identifiability pre-flight's report)."""
    report: dict[str, Any] = {}

    def checked(frame: pd.DataFrame) -> pd.DataFrame:
        out, found = preflight(frame, cfg, run_root)
        if len(out) != len(frame):
            raise ConfigError(f"identifiability.on_disconnected: {cfg.identifiability.on_disconnected!r} adds "
                              "sessions, which train.streaming cannot stream (they are not in the partitions); "
                              "allowed values with streaming: warn, merge, fail")
        report.update(found)
        return out

    needed = [QUERY_ID, DOC_ID, POSITION, CLICK, *(bias_factors(cfg) or [])]     # what the check reads (its
    if cfg.identifiability.on_disconnected == "intervene":                   # intervention numbers new sessions)
        needed.append(SESSION_ID)
    result = BAL().fit_streamed(sessions_path, valid, cfg, prepare=checked, prepare_columns=needed)
    return result, report
