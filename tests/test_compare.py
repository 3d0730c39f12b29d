"""`wpultr compare`: two real tiny runs side by side on their shared test queries, the paired p-value against
scipy's, the HTML page (parsed, figure embedded, replacing only its own kind), and one-line errors."""
import base64
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import ttest_rel
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.pipeline.runner import run_pipeline
from wpultr.report.compare import PAGE_MARK, compare_runs
from wpultr.rundir.layout import PER_QUERY
from wpultr.tables import pvalue

pytestmark = pytest.mark.e2e


def tiny_run(client, root: Path, name: str, method: str, seed: int = 3, n_queries: int = 30) -> str:
    cfg = config_from_dict({
        "name": name, "seed": seed, "run_dir": str(root / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3,
                 "simulate": {"n_queries": n_queries, "n_sessions": 300, "n_annotated_queries": 16}},
        "ranker": {"backbone": "mlp", "head": [16]},
        "train": {"method": method, "epochs": 1, "batch_size": 64},
        "discovery": {"n_sessions": 120, "n_bootstrap": 1}})
    return str(run_pipeline(cfg, client=client).run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dask_client):
    root = tmp_path_factory.mktemp("compare")
    return tiny_run(dask_client, root, "bal", "bal"), tiny_run(dask_client, root, "naive", "naive")


def independent_p(first: str, second: str, metric: str) -> tuple[float, int]:
    """scipy's paired t-test on the queries both per-query tables hold, joined by query key in this test."""
    a, b = (pd.read_parquet(Path(r) / PER_QUERY) for r in (first, second))
    joined = a.merge(b, on="query_key", suffixes=("_a", "_b"))
    return float(ttest_rel(joined[f"{metric}_b"], joined[f"{metric}_a"]).pvalue), len(joined)


def test_compare_prints_both_runs_and_scipys_p_value(runs):
    first, second = runs
    result = CliRunner().invoke(app, ["compare", first, second])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("metric"))
    assert header.split()[:3] == ["metric", "bal", "naive"]
    p, n = independent_p(first, second, "DCG@10")
    assert f"{n} test queries shared" in lines[0]
    row = next(line for line in lines if line.startswith("DCG@10 "))
    cells = row.split()                        # p to 3 decimals, '*' after it when p < 0.05
    assert cells[4] == pvalue(p) and (cells[5:] == ["*"]) is (p < 0.05)
    comparison = compare_runs([first, second])
    assert comparison.test("naive", "DCG@10")[0] == pytest.approx(p, rel=1e-12)
    means = pd.read_parquet(Path(second) / PER_QUERY)["DCG@10"].mean()
    assert comparison.mean("naive", "DCG@10") == pytest.approx(means)   # both runs score the same test queries


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.cells = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.cells.append(data)


def test_html_page_embeds_the_difference_figure_and_replaces_only_its_own(runs, tmp_path):
    page = tmp_path / "compare.html"
    for _ in range(2):                                   # the second run replaces the page the first wrote
        result = CliRunner().invoke(app, ["compare", *runs, "--html", str(page)])
        assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.startswith(PAGE_MARK)
    parsed = _Page()
    parsed.feed(text)
    assert len(parsed.images) == 1 and parsed.images[0].startswith("data:image/png;base64,")
    assert base64.b64decode(parsed.images[0].split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "DCG@10" in parsed.cells and "naive" in parsed.cells

    foreign = tmp_path / "notes.html"
    foreign.write_text("<html>my notes</html>")
    result = CliRunner().invoke(app, ["compare", *runs, "--html", str(foreign)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--html" in result.output and foreign.read_text() == "<html>my notes</html>"


def test_runs_without_shared_queries_are_a_one_line_error(runs, tmp_path, dask_client):
    other = tiny_run(dask_client, tmp_path, "elsewhere", "naive", seed=11, n_queries=25)
    keys = set(pd.read_parquet(Path(other) / PER_QUERY)["query_key"])
    assert not keys & set(pd.read_parquet(Path(runs[0]) / PER_QUERY)["query_key"])
    result = CliRunner().invoke(app, ["compare", runs[0], other])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "shares no test query" in result.output


def test_one_run_or_a_run_without_metrics_is_a_one_line_error(runs, tmp_path):
    result = CliRunner().invoke(app, ["compare", runs[0]])
    assert result.exit_code == 2 and "at least two" in result.output
    result = CliRunner().invoke(app, ["compare", runs[0], str(tmp_path)])
    assert result.exit_code == 2 and re.search(r"not a wpultr run directory", result.output)
    unevaluated = tmp_path / "unevaluated"
    shutil.copytree(runs[0], unevaluated)
    (unevaluated / "eval" / "per_query.parquet").unlink()
    result = CliRunner().invoke(app, ["compare", runs[0], str(unevaluated)])
    assert result.exit_code == 2 and re.search(r"no eval/per_query\.parquet", result.output), result.output
