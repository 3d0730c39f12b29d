"""Export a finished run's ranker and score its test queries through the CLI, as a user would."""
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.rundir import layout as L


def export_and_score(run: Path, tmp: Path) -> tuple[Path, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(export dir, annotations of the test queries, `wpultr score` output, the run's own test scores),
    the last two sorted by (query_id, doc_id) so they line up row for row."""
    cli = CliRunner()
    exported = tmp / "model"
    out = cli.invoke(app, ["export", str(run), "--out", str(exported)])
    assert out.exit_code == 0, out.output
    test = pd.read_parquet(run / L.TEST_SCORES)
    source = pd.read_parquet(run / L.ANNOTATIONS)
    annotations = source[source.query_id.isin(test.query_id.unique())]
    path = tmp / "annotations.parquet"
    annotations.to_parquet(path)
    scores = tmp / "scores.parquet"
    scored = cli.invoke(app, ["score", str(exported), str(path), "--out", str(scores)])
    assert scored.exit_code == 0, scored.output
    mine = pd.read_parquet(scores).sort_values(["query_id", "doc_id"]).reset_index(drop=True)
    theirs = test.sort_values(["query_id", "doc_id"]).reset_index(drop=True)
    return exported, annotations, mine, theirs
