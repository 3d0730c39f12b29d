"""Own tables documented by example (issue 44 item 6): docs/input.md's worked example runs as written — tables
written with pandas, its run config, `wpultr run` and `wpultr score` on a CSV table —, and a table without doc_id
is refused at ingest, naming the column."""
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.io.tables import read_sessions_table
from wpultr.schema import SchemaError, page_features_from_config

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "input.md"


def block(marker: str, language: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```{language}\n(.*?)```", DOC.read_text(), re.S)
    assert found, f"docs/input.md lost its {marker} block"
    return found.group(1)


def test_a_sessions_table_without_doc_id_is_refused_at_ingest(tmp_path):
    table = pd.DataFrame({"session_id": [1, 1], "query_id": ["q", "q"], "position": [1, 2], "click": [1, 0],
                          "features": ["0.1 0.2", "0.3 0.4"]})
    table.to_csv(tmp_path / "s.csv", index=False)
    features = page_features_from_config({"position": "ordinal"})
    with pytest.raises(SchemaError, match=r"s\.csv: no column 'doc_id'"):
        read_sessions_table(tmp_path / "s.csv", features)
    table.assign(doc_id=["a", ""]).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(SchemaError, match=r"t\.csv: column 'doc_id' row 1 is empty"):
        read_sessions_table(tmp_path / "t.csv", features)
    assert len(read_sessions_table(_with_docs(table, tmp_path), features)) == 2


def _with_docs(table, tmp_path):
    table.assign(doc_id=["a", "b"]).to_csv(tmp_path / "u.csv", index=False)
    return tmp_path / "u.csv"


@pytest.mark.e2e
def test_the_worked_example_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(block("own-tables-example", "python"), str(DOC), "exec"), {})
    (tmp_path / "mine.yaml").write_text(block("own-tables-config", "yaml"))
    commands = [line.split("#")[0].split()[1:] for line in block("own-tables-commands", "bash").splitlines()]
    assert commands[0] == ["run", "mine.yaml"]
    done = CliRunner().invoke(app, commands[0])
    assert done.exit_code == 0, done.output
    assert "Verdict" in done.output and "shipped: naive epoch" in done.output
    scored = CliRunner().invoke(app, commands[1])
    assert scored.exit_code == 0, scored.output
    scores = pd.read_parquet(tmp_path / "scores.parquet")
    assert len(scores) == len(pd.read_csv(tmp_path / "annotations.csv")) and scores["score"].notna().all()
