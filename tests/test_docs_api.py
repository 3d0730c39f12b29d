"""The Python API and the config reference (issue 44 item 8): the user guide's five-line notebook example runs as
written, `import wpultr` stays light, `wpultr config show` is generated from the settings dataclasses, and the CLI
answers --version and -h."""
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wpultr.cli import app

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "user-guide.md"


def api_example() -> str:
    text = GUIDE.read_text()
    block = re.search(r"<!-- api-example -->\n```python\n(.*?)```", text, re.S)
    assert block, "the user guide lost its API example"
    return block.group(1)


def test_the_example_is_five_lines():
    assert len(api_example().strip().splitlines()) == 5


@pytest.mark.e2e
def test_the_notebook_example_runs_as_written(tmp_path, monkeypatch, capsys):
    code = api_example().replace('"pipelines/bal.yaml"', repr(str(REPO / "pipelines" / "bal.yaml"))) \
        .replace('"data/sample/annotations.tsv.gz"', repr(str(REPO / "data" / "sample" / "annotations.tsv.gz")))
    monkeypatch.chdir(tmp_path)                   # runs/ and model-notebook/ land here, not in the checkout
    exec(compile(code, str(GUIDE), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("epoch 0 ") and "relevance_score -> click" in lines[1]
    assert (tmp_path / "runs" / "bal-notebook" / "report.html").exists()
    assert (tmp_path / "model-notebook" / "export.json").exists()
    assert re.fullmatch(r"\[[-0-9.e ]+\]", lines[2].strip()) or lines[2].startswith("[")


def test_import_wpultr_is_light_and_re_exports_the_api_lazily():
    code = ("import sys, wpultr; heavy = [m for m in ('torch', 'pandas', 'dask', 'wpultr.api') if m in sys.modules];"
            "print(heavy); print(sorted(a for a in ('run', 'open_run', 'load_ranker', 'Run') if a in wpultr.__all__));"
            "print(wpultr.run.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": ""}).stdout.splitlines()
    assert out == ["[]", "['Run', 'load_ranker', 'open_run', 'run']", "wpultr.api"]


def test_config_show_lists_every_key_of_a_section_with_its_default_and_allowed_values():
    from wpultr.settings.bal import BalConfig
    shown = CliRunner().invoke(app, ["config", "show", "bal"])
    assert shown.exit_code == 0, shown.output
    rows = {line.split()[0]: line for line in shown.output.splitlines()[1:]}
    config = BalConfig()
    for f in dataclasses.fields(BalConfig):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            assert all(f"bal.{f.name}.{g.name}" in rows for g in dataclasses.fields(value))
        else:
            assert f"bal.{f.name}" in rows
    assert rows["bal.graph"].split()[1:5] == ["discovered", "discovered", "|", "position"]
    assert "cap on a self-normalised weight" in rows["bal.weights.max_weight"]     # the comment beside the field
    assert "torch's CPU threads" in rows["bal.cpu_threads"]                        # the comment above it
    defaults = CliRunner().invoke(app, ["config", "show", "--defaults", "bal"]).output
    import yaml

    from wpultr.config import config_from_dict
    assert config_from_dict(yaml.safe_load(defaults)).bal == BalConfig()         # the defaults load back as they are
    bad = CliRunner().invoke(app, ["config", "show", "nope"])
    assert bad.exit_code == 2 and "sections: bal, cluster" in bad.output


def test_version_and_short_help():
    from wpultr import __version__
    assert CliRunner().invoke(app, ["--version"]).output.strip() == f"wpultr {__version__}"
    assert "Usage: " in CliRunner().invoke(app, ["-h"]).output
    assert " evaluate [OPTIONS]" in CliRunner().invoke(app, ["evaluate", "-h"]).output
