"""The featurize stage as a function from files to files (the runner wires it in): lexical features for token-only
logs, a featurizer fitted per partition on the Dask workers and merged, then every partition and the annotations
featurized with the merged one."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from distributed import wait

from ..io.parquet import partition_paths, read_table
from ..rundir.files import write_parquet
from ..schema import FEATURES
from .lexical import LexicalFeaturizer, featurize_partitions


def _fit_lexical_partition(path: str) -> LexicalFeaturizer:
    return LexicalFeaturizer().fit(pd.read_parquet(path))


def featurize_run(sessions_dir: Path, annotations: Path, out_dir: Path, featured_annotations: Path, state: Path,
                  client: Any) -> dict[str, Any]:
    """Fit the lexical featurizer over every partition of `sessions_dir` (on `client`), save it to `state`, write the
    featured partitions to `out_dir` and the featured annotations to `featured_annotations`; what the stage reports."""
    parts = [str(p) for p in partition_paths(sessions_dir)]
    states = client.gather(client.map(_fit_lexical_partition, parts, pure=False))
    featurizer = states[0]
    for other in states[1:]:
        featurizer = featurizer.merge(other)
    featurizer.save(state)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = client.map(featurize_partitions, [[p] for p in parts], out_dir=str(out_dir), featurizer=featurizer,
                         pure=False)
    wait(written)
    client.gather(written)
    table = read_table(annotations)
    table[FEATURES] = list(featurizer.transform(table))
    write_parquet(featured_annotations, table)
    return {"n_features": len(featurizer.feature_names_), "partitions": len(parts)}
