"""`wpultr …`: the command line over the pipeline, the simulator, ingest and evaluation.

Start-up is kept light: this module and the command modules it mounts import no heavy package (torch, Dask,
pandas, Arrow, SciPy, …) at module level; each command imports what it runs inside its body, so `wpultr --help`,
`status` and `evaluate` load none of them (tests/test_startup.py)."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from . import __version__, api
from .api import export as export_run
from .api import load_ranker, read_scoring_table
from .causal.cli import discover_command, graph_app
from .cli_support import nest, parse_sets, user_errors
from .config_reference import defaults_yaml, reference_text
from .errors import ConfigError
from .experiment.cli import experiment as experiment_command
from .identifiability.cli import identifiability_app
from .pipeline.status import format_status, status_of
from .report.text import click_metrics_text, ingest_text, metrics_text
from .report.verdict import verdict
from .rundir import layout as L
from .rundir.epochs import shipped, shipped_line
from .rundir.files import RunDir, check_output, read_json, write_parquet
from .rundir.layout import MARKER, REPORT
from .rundir.ownership import local_path_of, normalise, output_of, output_path
from .storage import is_url, readable_run_dir

app = typer.Typer(add_completion=False, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]},
                  help="wpultr: learn an unbiased ranker from biased click logs (BAL and baselines) on Dask. "
                       "Python: import wpultr; wpultr.run(config, **overrides) (docs/user-guide.md).")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"wpultr {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """wpultr: learn an unbiased ranker from biased click logs (BAL and baselines) on Dask."""


def _cluster(scheduler: str | None, workers: int | None = None):
    from .config import ClusterConfig  # lazy: +0.9 s (pandas, pyarrow)
    cfg = ClusterConfig(scheduler=scheduler)
    if workers:
        cfg.n_workers = workers
    return cfg


@app.command()
@user_errors
def run(config: Path = typer.Argument(..., help="YAML run config (see pipelines/)"),
        set_: list[str] | None = typer.Option(None, "--set", help="override a key: --set train.epochs=2"),
        scheduler: str | None = typer.Option(None, help="address of an existing Dask scheduler"),
        fresh: bool = typer.Option(False, help="delete the run directory first instead of resuming"),
        baseline: str | None = typer.Option(None, help="a finished run (e.g. Naive on the same logs) to test the "
                                                          "ranker against in the verdict (paired t-tests)")):
    """Run (or resume) the pipeline a config describes; prints the verdict, the run directory and report."""
    overrides = parse_sets(set_)
    if scheduler:
        overrides["cluster.scheduler"] = scheduler
    result = api.run(config, fresh=fresh, progress=True, sets=overrides)     # the notebook's code path
    typer.echo("\n" + _verdict_text(result.path, baseline, rewrite_report=True))
    typer.echo(f"run directory: {result.path}")
    typer.echo(f"report: {result.path / REPORT}")


def _verdict_text(run_dir: Path, baseline: str | None, rewrite_report: bool = False) -> str:
    """The verdict of a finished run; with a baseline (and `rewrite_report`), its report gets the paired tests."""
    found = verdict(run_dir, baseline)
    if baseline is not None and rewrite_report:
        from .report.html import write_report  # lazy: +0.1 s (numpy, the report's figures)
        write_report(RunDir(run_dir), baseline=baseline)
    return found.text()


@app.command("verdict")
@user_errors
def verdict_command(run_dir: str = typer.Argument(..., help="a finished run directory"),
                    baseline: str | None = typer.Option(None, help="a finished run to test against (paired "
                                                                      "t-tests over the test queries both scored)"),
                    as_json: bool = typer.Option(False, "--json", help="print the verdict as JSON")):
    """What a finished run found and whether to ship its ranker: biases, corrections, identifiability, test
    metrics, the click model against per-position CTR, and paired tests against a baseline run."""
    with readable_run_dir(run_dir, "RUN_DIR") as local:
        found = verdict(local, baseline)
    typer.echo(json.dumps(found.to_dict(), indent=2) if as_json else found.text())


@app.command()
@user_errors
def simulate(out: str = typer.Option(..., help="directory to write the logs, annotations and truth to (a path or a "
                                             "file:// URL; what is there is replaced only if simulate wrote it)"),
             config: Path | None = typer.Option(None, help="run config whose data.simulate section to use"),
             fmt: str = typer.Option("baidu", "--format", help="baidu (gzip text) or parquet"),
             seed: int = typer.Option(0, help="random seed"),
             set_: list[str] | None = typer.Option(None, "--set",
                                                      help="override: --set data.simulate.n_sessions=500")):
    """Write simulated whole-page click logs with their known truth."""
    from .config import config_from_dict, load_config  # lazy: +0.9 s (pandas, pyarrow)
    from .simulate import simulate as run_simulator  # lazy: +0.9 s (pandas, pyarrow)
    if fmt not in ("baidu", "parquet"):
        raise ConfigError(f"--format: {fmt!r} is not allowed; allowed values: 'baidu', 'parquet'")
    cfg = load_config(config, parse_sets(set_)) if config else config_from_dict(
        nest(parse_sets(set_)))
    from .simulate.generate import COMMAND, output_names  # lazy: +0.9 s (pandas, pyarrow)
    out = output_path(out, "--out")
    for name in output_names(fmt):      # before simulating, so a refused --out costs nothing
        check_output(out / name, output_of(COMMAND), [config] if config else [], "--out")
    logs = run_simulator(cfg.data.simulate, seed=seed)
    logs.write(out, fmt=fmt)
    typer.echo(f"wrote {logs.sessions['session_id'].nunique()} sessions, {len(logs.sessions)} results to {out}")


@app.command()
@user_errors
def ingest(paths: list[str] = typer.Argument(..., help="log files (Baidu .gz, Parquet/CSV, or the Baidu-ULTR "
                                                          "embedding datasets' Feather/Parquet files)"),
           out: str = typer.Option(..., help="output directory (sessions/ and quarantine/ go under it; a path or a "
                                             "file:// URL; what is there is replaced only if ingest wrote it)"),
           fmt: str = typer.Option("auto", "--format", help="auto (by file name; a Parquet file holding "
                                                             "query_document_embedding is an embedding dataset), "
                                                             "baidu, table (Parquet/CSV with declared columns), or "
                                                             "embeddings (Baidu-ULTR embedding datasets, either "
                                                             "stored form)"),
           config: Path | None = typer.Option(None, help="run config declaring the page features (format table) "
                                                            "or data.embeddings (format embeddings)"),
           partition_rows: int = typer.Option(200_000, help="rows per Parquet partition"),
           scheduler: str | None = typer.Option(None, help="address of an existing Dask scheduler (used "
                                                               "whatever the input's size)"),
           as_json: bool = typer.Option(False, "--json", help="print the summary as JSON (for machines)")):
    """Read logs into validated, partitioned Parquet; malformed lines go to quarantine with file and line.
    Less than 50 MB of input (cluster.IN_PROCESS_INPUT_BYTES) is read in this process, with no cluster."""
    from .cluster import client_for_input  # lazy: +0.9 s (pandas, pyarrow)
    out = output_path(out, "--out")
    if fmt not in INGEST_FORMATS:
        raise ConfigError(f"--format: {fmt!r} is not allowed; allowed values: "
                          f"{', '.join(repr(f) for f in INGEST_FORMATS)}")
    if fmt == "auto":
        fmt = _log_format(paths)
    with client_for_input(_cluster(scheduler), paths) as client:
        if fmt == "baidu":
            from .io.baidu import ingest_baidu  # lazy: +1.9 s (pandas, pyarrow, scipy)
            summary = ingest_baidu(sorted(paths), out, client, partition_rows)
        elif fmt == "embeddings":
            from .config import RunConfig, load_config  # lazy: +0.9 s (pandas, pyarrow)
            from .io.baidu_embeddings import ingest_embedding_sessions  # lazy: +0.9 s (pandas, pyarrow)
            emb = (load_config(config) if config else RunConfig()).data.embeddings
            summary, _ = ingest_embedding_sessions(sorted(paths), out, client, width=emb.width,
                                                   ltr_features=tuple(emb.ltr_features),
                                                   partition_rows=partition_rows, batch_rows=emb.batch_rows)
        else:
            from .config import RunConfig, load_config  # lazy: +0.9 s (pandas, pyarrow)
            from .io.tables import ingest_tables  # lazy: +0.9 s (pandas, pyarrow)
            cfg = load_config(config) if config else RunConfig()
            summary = ingest_tables(sorted(paths), out, cfg.data.parsed_page_features, client, partition_rows)
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        typer.echo(ingest_text(summary.to_dict()))


INGEST_FORMATS = ("auto", "baidu", "table", "embeddings")


def _log_format(paths: list[str]) -> str:
    """The --format `auto` means: 'embeddings' when every path is a Feather file or a Parquet file holding the
    embedding datasets' query_document_embedding column, 'table' when every path names another Parquet or CSV table,
    'baidu' when none does; a mix is an error."""
    kinds = sorted({_path_format(p) for p in paths})
    if len(kinds) > 1:
        raise ConfigError(f"--format: the paths mix {' and '.join(_FORMAT_WORDS[k] for k in kinds)}; ingest them "
                          f"separately or give --format {'|'.join(INGEST_FORMATS[1:])}")
    return kinds[0]


_FORMAT_WORDS = {"baidu": "Baidu logs", "table": "tables (.parquet/.csv)",
                 "embeddings": "embedding dataset files (.feather, or Parquet with query_document_embedding)"}


def _path_format(path: str) -> str:
    """One path's format by its name (and a Parquet file's schema, read from its footer)."""
    from .io.baidu_embeddings import FEATHER_SUFFIXES, is_embedding_parquet  # lazy: +0.9 s (pandas, pyarrow)
    name = path.lower()
    if name.endswith(FEATHER_SUFFIXES):
        return "embeddings"
    if name.endswith((".parquet", ".pq")):
        return "embeddings" if is_embedding_parquet(path) else "table"
    return "table" if name.endswith((".csv", ".csv.gz")) else "baidu"


@app.command()
@user_errors
def evaluate(run_dir: str = typer.Argument(..., help="a finished run directory: a path or an fsspec URL "
                                                     "(s3://, gs://, file://, …)"),
             annotations: Path | None = typer.Option(None, help="score this annotation table instead "
                                                                    "(Parquet, or a Baidu annotation file)"),
             clicks: Path | None = typer.Option(None, help="held-out sessions (a Parquet file or an ingested "
                                                               "sessions directory): print the click log-likelihood "
                                                               "and perplexity of the run's click models on them"),
             as_json: bool = typer.Option(False, "--json", help="print the metrics as JSON (for machines)")):
    """Print the metrics of a run's ranker: its held-out queries, another annotation table, or (label-free) how
    well its click models predict the clicks of held-out sessions. The click models are the shipped epoch's."""
    include = (L.CONFIG_FILE, L.RANKER_DIR, L.METRICS, L.LEXICAL_STATE, L.BIAS, L.HISTORY)
    if clicks is not None:   # what the click models are read and fitted from
        include += (L.TRUTH_DIR, L.SESSIONS_DIR, L.FEATURED_SESSIONS_DIR)
    with readable_run_dir(run_dir, "RUN_DIR", include=include) as run:
        if not (run / L.RANKER_DIR).is_dir():
            raise FileNotFoundError(f"{run}: no trained ranker in {L.RANKER_DIR}/ (has the run finished?)")
        method = read_json(run / L.BIAS).get("method") if (run / L.BIAS).exists() else None
        heading = shipped_line(shipped(run), method)
        if clicks is not None:
            result = _click_metrics(run, clicks)
            typer.echo(json.dumps(result, indent=2) if as_json else f"{heading}\n\n{click_metrics_text(result)}")
            return
        if annotations is None:     # the stored metrics: read, nothing scored (so no config, pandas or torch)
            metrics = read_json(run / L.METRICS)
            if as_json:
                typer.echo(json.dumps(metrics, indent=2))
                return
            text = [heading, "", metrics_text(metrics)]
            if metrics.get("clicks"):
                text += ["", click_metrics_text(metrics["clicks"])]
            typer.echo("\n".join(text))
            return
        from .config import saved_config  # lazy: +0.9 s (pandas, pyarrow)
        from .evaluation.annotated import evaluate_ranker  # lazy: +0.9 s (pandas, pyarrow)
        from .io.parquet import read_table  # lazy: +0.9 s (pandas, pyarrow)
        cfg = saved_config(run / L.CONFIG_FILE)
        if annotations.suffix == ".parquet":
            table = read_table(annotations)
        else:
            from .io.baidu import read_baidu_annotations  # lazy: +1.9 s (pandas, pyarrow, scipy)
            table, bad = read_baidu_annotations(annotations)
            if len(bad):
                typer.echo(f"{len(bad)} malformed annotation lines set aside", err=True)
        lexical = run / L.LEXICAL_STATE
        if lexical.exists():
            from .features.lexical import LexicalFeaturizer  # lazy: +0.9 s (pandas, pyarrow)
            from .schema import FEATURES  # lazy: +0.9 s (pandas, pyarrow)
            table[FEATURES] = list(LexicalFeaturizer.load(lexical).transform(table))
        metrics, _, _ = evaluate_ranker(run / L.RANKER_DIR, table, cfg)
    typer.echo(json.dumps(metrics, indent=2) if as_json
               else f"{heading}\n\n{metrics_text(metrics, f'queries of {annotations}')}")


def _click_metrics(run: Path, clicks: Path) -> dict:
    """The click metrics of the run at `run` (its shipped epoch's click models) on the held-out sessions `clicks`."""
    from .config import saved_config  # lazy: +0.9 s (pandas, pyarrow)
    from .evaluation.click_metrics import heldout_click_metrics  # lazy: +1.9 s (pandas, pyarrow, scipy)
    if not clicks.exists():
        raise FileNotFoundError(f"--clicks: {clicks}: no such file or directory")
    if (clicks / "sessions").is_dir():                   # an ingest output directory: its sessions table
        clicks = clicks / "sessions"
    cfg = saved_config(run / L.CONFIG_FILE)
    return heldout_click_metrics(RunDir(run), clicks, cfg)


@app.command()
@user_errors
def export(run_dir: str = typer.Argument(..., help="a finished run directory: a path or an fsspec URL"),
           out: str = typer.Option(..., help="directory to write the exported ranker to: a path or an fsspec URL "
                                             "(an existing one is replaced only if it is an earlier export)")):
    """Write the run's ranker as safetensors weights plus config (and feature state) to ship it."""
    written = export_run(run_dir, out)
    local = local_path_of(str(written)) if is_url(written) else normalise(written)   # `..` resolved, as written
    if local is not None:           # a local directory (or file:// URL): its export.json says which epoch shipped
        from .export import EXPORT_FILE  # lazy: +0.9 s (pandas, pyarrow)
        bias = json.loads((local / EXPORT_FILE).read_text()).get("bias") or {}
        if bias.get("shipped"):
            typer.echo(shipped_line(bias["shipped"], bias.get("method")))
    typer.echo(f"exported ranker: {written}")


@app.command()
@user_errors
def score(model: str = typer.Argument(..., help="an exported ranker (wpultr export) or a run's ranker/ directory: "
                                                 "a path or an fsspec URL (file://, s3://, …)"),
          input_: Path = typer.Argument(..., metavar="INPUT", help="annotation file (Baidu layout) or Parquet "
                                                                   "table (sessions or annotations)"),
          out: str = typer.Option(..., help="Parquet file to write, a path or a file:// URL: key columns plus "
                                            "`score` (an existing file is replaced only if an earlier `wpultr score` "
                                            "wrote it)"),
          batch_size: int = typer.Option(1024, help="rows scored at once")):
    """Score a table with a saved ranker (loading never unpickles)."""
    out = output_path(out, "--out")
    SCORES = output_of("wpultr score")               # an earlier table of this command only (its manifest)
    inputs = (None if is_url(model) else model, input_)
    check_output(out, SCORES, inputs, "--out")      # before the scoring, so a refused --out costs nothing
    scored = load_ranker(model).score_table(read_scoring_table(input_), batch_size)
    write_parquet(out, scored, SCORES, inputs, "--out")
    typer.echo(f"scored {len(scored)} rows -> {out}")


@app.command()
@user_errors
def compare(runs: list[str] = typer.Argument(..., help="finished run directories (paths or fsspec URLs); the first "
                                                      "is the baseline the others are tested against"),
            html: str | None = typer.Option(None, "--html", help="also write an HTML page with the per-query "
                                                                     "differences plotted (a path or a file:// URL; "
                                                                     "an existing file is replaced only if `wpultr "
                                                                     "compare` wrote it)"),
            as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON (for machines)")):
    """Runs' metrics side by side on the test queries they share, with paired t-tests against the first run."""
    from .report.compare import PAGE, compare_runs, format_text, to_dict, write_html  # lazy: +0.9 s (pandas, pyarrow)
    inputs = [r for r in runs if not is_url(r)]
    html = output_path(html, "--html") if html is not None else None
    if html is not None:
        check_output(html, PAGE, inputs, "--html")    # before reading the runs, so a refused --html costs nothing
    comparison = compare_runs(runs)
    typer.echo(json.dumps(to_dict(comparison), indent=2) if as_json else format_text(comparison))
    if html is not None:
        typer.echo(f"page: {write_html(comparison, html, inputs)}")


@app.command()
@user_errors
def status(path: str = typer.Argument(..., help="a run directory (a path or an fsspec URL) or an experiment "
                                                "directory"),
           as_json: bool = typer.Option(False, "--json", help="print the status as JSON")):
    """Stages done, running, failed or died (with times) of a run; the state of every run of an experiment."""
    # a run directory (its marker) never loads the experiment code, which imports the config (Dask, SciPy)
    experiment = not is_url(path) and Path(path).is_dir() and not (Path(path) / MARKER).exists()
    if experiment:
        from .experiment.status import (  # lazy: +0.9 s (pandas, pyarrow)
            experiment_status,
            format_experiment_status,
            is_experiment_dir,
        )
        experiment = is_experiment_dir(Path(path))
    if experiment:
        found, text = experiment_status(Path(path)), format_experiment_status
    else:
        found, text = status_of(path), format_status
    typer.echo(json.dumps(found.to_dict(), indent=2) if as_json else text(found))


config_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="the run config's keys: defaults, allowed values, descriptions")


@config_app.command("show")
@user_errors
def config_show(section: str | None = typer.Argument(None, help="a section (bal, train, discovery, …), a "
                                                                   "subsection (bal.weights) or one key"),
                defaults: bool = typer.Option(False, "--defaults", help="print the defaults as YAML, a config "
                                                                        "to start from, each key described")):
    """Every key of the run config with its default, allowed values and a one-line description (generated from the
    settings dataclasses)."""
    typer.echo(defaults_yaml(section) if defaults else reference_text(section))


app.add_typer(config_app, name="config", help="the run config reference: every key, its default and allowed values")
app.command("experiment", help="Run methods × seeds (× settings) on Dask and build the tables, figures and "
                            "HTML report.")(experiment_command)
# `wpultr discover` and `wpultr graph` live beside their stage (wpultr/causal/cli.py).
app.command("discover")(discover_command)
app.add_typer(graph_app, name="graph", help="inspect the causal graphs a run discovered")
app.add_typer(identifiability_app, name="identifiability",
              help="check whether logs can separate bias factors from relevance")

if __name__ == "__main__":
    app()
