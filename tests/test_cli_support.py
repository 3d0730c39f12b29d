"""User errors are one line (exit code 2); every other error keeps its traceback; fallbacks are logged."""
from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from wpultr.cli_support import nest, parse_sets, user_errors
from wpultr.errors import ConfigError


def _app(error: Exception) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @user_errors
    def fail() -> None:
        raise error

    return app


def test_a_user_error_is_one_line_and_exit_code_2():
    result = CliRunner().invoke(_app(ConfigError("train.epochs: must be >= 1, got 0")), [])
    assert result.exit_code == 2
    assert result.output.strip() == "error: train.epochs: must be >= 1, got 0"
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_any_other_error_keeps_its_traceback():
    """A RuntimeError is a bug, not a user error: it is not turned into a one-line message."""
    result = CliRunner().invoke(_app(RuntimeError("internal invariant broken")), [])
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)
    assert "error: internal invariant broken" not in result.output


def test_set_overrides_nest_into_config_sections():
    assert nest(parse_sets(["train.epochs=3", "bal.features=[position]"])) == \
        {"train": {"epochs": 3}, "bal": {"features": ["position"]}}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_sets(["train.epochs"])


@pytest.mark.e2e
def test_bal_without_a_dask_client_says_it_runs_discovery_serially():
    """In a fresh process (no client of another test around) the serial fallback is a logged warning."""
    code = ("import logging; logging.basicConfig(level=logging.WARNING); "
            "from wpultr.bal.method import _current_client; assert _current_client() is None")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "no Dask client found; causal discovery runs its CI tests serially" in out.stderr


def test_a_figure_without_its_input_is_skipped_and_logged(tmp_path, caplog):
    from wpultr.experiment.figures import logging_order
    with caplog.at_level(logging.INFO, logger="wpultr.experiment.figures"):
        assert logging_order(tmp_path / "no_run") is None
    assert "no logged order" in caplog.text and "FileNotFoundError" in caplog.text
