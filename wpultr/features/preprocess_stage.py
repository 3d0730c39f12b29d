"""The preprocess stage as a function from files to files (the runner wires it in).

* `fit_page_encoder`: sessions Parquet directory → `<out_dir>/page_features.json` + embeddings
  (Bradley–Terry score tables, vocabularies, standardisation), fitted over all partitions on Dask.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds

from ..io.parquet import partition_paths
from ..rundir.files import atomic_path
from ..schema import POSITION, SESSION_ID, PageFeature, SchemaError
from ..settings.discovery import PreprocessConfig
from .encoders import PageFeatureEncoder


def _summarise_partition(path: str, encoder: PageFeatureEncoder, columns: list[str]) -> dict[str, Any]:
    present = ds.dataset(path, format="parquet").schema.names
    missing = [c for c in columns if c not in present]
    if missing:
        raise SchemaError(f"{path}: missing column(s) {missing}; present: {present}")
    return encoder.summarise(pd.read_parquet(path, columns=columns))


def fit_page_encoder(sessions_dir: str | Path, page_features: Sequence[PageFeature], cfg: PreprocessConfig,
                     out_dir: str | Path, client: Any = None) -> PageFeatureEncoder:
    """Fit the page-feature encoder from every partition's mergeable statistics; save it into `out_dir`."""
    parts = [str(p) for p in partition_paths(sessions_dir)]
    if not parts:
        raise FileNotFoundError(f"{sessions_dir}: table directory holds no Parquet partitions")
    columns = list(dict.fromkeys([SESSION_ID, POSITION] + [f.name for f in page_features]))
    encoder = PageFeatureEncoder(page_features, cfg)
    if client is not None:
        summaries = client.gather(client.map(_summarise_partition, parts, encoder=encoder, columns=columns))
    else:
        summaries = [_summarise_partition(p, encoder, columns) for p in parts]
    encoder.fit_summary(reduce(PageFeatureEncoder.merge_summaries, summaries))
    with atomic_path(out_dir) as tmp:
        encoder.save(tmp)
    return encoder
