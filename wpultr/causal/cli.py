"""`wpultr discover …` and `wpultr graph …` (mounted by the top-level CLI, wpultr/cli.py).

* `discover`: one epoch of BAL §3.1's causal discovery from a sessions table on disk — fit the
  page-feature encoder (`features.preprocess_stage.fit_page_encoder`), sample, run PC and write epoch_<k>/graph.json +
  biases.json (`causal.discover_stage.discover_epoch`).
* `graph show / diff`: look at the graphs a run discovered (the run directory may be an fsspec URL).
"""
from __future__ import annotations

import json
import shutil
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..causal.biases import identify_biases
from ..causal.graph import diff_graphs, epoch_dir, graph_epochs, load_epoch_graph, render, to_dot, to_text
from ..cli_support import nest, parse_sets, user_errors
from ..errors import ConfigError
from ..rundir.epochs import shipped_graph_epoch
from ..rundir.files import check_output, is_run_dir
from ..rundir.layout import BIAS, BIASES_FILE, EPOCH_PREFIX, GRAPH_FILE, HISTORY
from ..rundir.ownership import output_of, record
from ..storage import is_url, readable_run_dir, write_bytes

graph_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Inspect the click-model graphs a run discovered (one per epoch).")
ENCODER_SUBDIR = "page_features"


class GraphFormat(str, Enum):
    text = "text"
    dot = "dot"
    svg = "svg"
    png = "png"


def _bias_lines(graph) -> list[str]:
    report = identify_biases(graph)
    lines = ["", f"click parents: {', '.join(report.click_parents) or '(none)'}",
             f"page-feature biases (x -> click): {', '.join(report.page_feature_biases) or '(none)'}"]
    for c in report.confounded:
        lines.append(f"confounded (case {c.case}): {c.feature} <- {', '.join(c.parents)}")
    return lines


def _read_bias(run: Path) -> dict[str, Any]:
    """A BAL run's `train/bias.json` (empty for a run without one: `wpultr discover` alone)."""
    path = Path(run) / BIAS
    return json.loads(path.read_text()) if path.exists() else {}


def _examination_lines(bias: dict[str, Any], k: int) -> list[str]:
    """The click model's examination by position (relative to the first) that epoch k of a BAL run learned."""
    epochs = {e.get("epoch"): e for e in bias.get("epochs", [])}
    profile = (epochs.get(k) or {}).get("examination_by_position")
    if not profile:
        return []
    return ["", f"examination by position (epoch {k}'s click model, relative to the first): "
            + ", ".join(f"{p}: {e:.3f}" for p, e in profile.items())]


def _set_aside_lines(bias: dict[str, Any]) -> list[str]:
    """The page features a BAL run kept in its graph but did not correct (`bal.separability`), and why."""
    record = bias.get("separability", {})
    if not record.get("set_aside"):
        return []
    shares = record["within_document_share"]
    return ["", "not corrected (fixed for the same document, so its effect on clicks cannot be told from relevance): "
            + ", ".join(f"{x} (within-document share {shares[x]:.3f} < {record['min_within_document_share']})"
                        for x in record["set_aside"])]


def _shipped_epoch(run: Path) -> int | None:
    return shipped_graph_epoch(run)


def _default_epoch(run: Path, asked: int | None, shipped: int | None) -> int | None:
    """The epoch asked for; else the shipped ranker's epoch when it has a graph (one epoch story: what a run shows
    is the shipped epoch's unless asked otherwise); else the latest."""
    if asked is not None or shipped is None:
        return asked
    return shipped if shipped in graph_epochs(run) else None


def _epoch_heading(k: int, shipped: int | None) -> str:
    if shipped is None:
        return f"epoch {k}"
    return f"epoch {k} (the shipped ranker's)" if k == shipped else f"epoch {k} (shipped: epoch {shipped})"


_GRAPH_FILES = (f"{EPOCH_PREFIX}*", BIAS, HISTORY)      # what `wpultr graph` reads of a run at a URL


# what `graph show --output` may replace: a file of the format it writes, as an earlier `graph show` wrote it
GRAPH_OUTPUT = output_of("wpultr graph show")            # --output: only this command's own earlier file
GRAPH_IN_RUN = output_of("wpultr graph show", in_runs=True)   # the default image, in the run it draws


@graph_app.command("show")
@user_errors
def show(run: str = typer.Argument(..., help="run directory: a path or an fsspec URL (s3://, gs://, file://, …)"),
         epoch: int | None = typer.Option(None, "--epoch", "-e", help="epoch to show (default: the shipped "
                                             "ranker's epoch, else the latest)"),
         fmt: GraphFormat = typer.Option(GraphFormat.text, "--format", "-f", help="text, dot, svg or png"),
         output: str | None = typer.Option(None, "--output", "-o",
                                              help="file to write, a path or a URL (svg/png default: "
                                                   "epoch_<k>/graph.<format> in the run directory)")):
    """Print an epoch's graph (edges, stabilities, biases) or render it with Graphviz."""
    with readable_run_dir(run, "RUN", include=_GRAPH_FILES) as local:
        shipped = _shipped_epoch(local)
        k, graph = load_epoch_graph(local, _default_epoch(local, epoch, shipped))
        if fmt in (GraphFormat.text, GraphFormat.dot):
            if fmt is GraphFormat.text:
                bias = _read_bias(local)
                body = "\n".join([_epoch_heading(k, shipped), to_text(graph), *_bias_lines(graph),
                                  *_examination_lines(bias, k), *_set_aside_lines(bias)])
            else:
                body = to_dot(graph)
            if output is None:
                typer.echo(body)
            else:
                write_bytes(output, (body + "\n").encode(), GRAPH_OUTPUT, "--output")
                typer.echo(output)
            return
        image = render(graph, fmt.value)
    # the default image goes into the run directory, at its URL when it has one (one atomic write either way)
    name = f"graph.{fmt.value}"
    target = output or (f"{run.rstrip('/')}/{epoch_dir('', k).as_posix()}/{name}" if is_url(run)
                        else str(epoch_dir(run, k) / name))
    write_bytes(target, image, GRAPH_OUTPUT if output else GRAPH_IN_RUN, "--output" if output else None)
    typer.echo(target)


@graph_app.command("diff")
@user_errors
def diff(run: str = typer.Argument(..., help="run directory: a path or an fsspec URL"),
         from_epoch: int = typer.Option(..., "--from", help="earlier epoch"),
         to_epoch: int = typer.Option(..., "--to", help="later epoch")):
    """List the edges that appeared, vanished or were re-oriented between two epochs."""
    with readable_run_dir(run, "RUN", include=_GRAPH_FILES) as local:
        _, before = load_epoch_graph(local, from_epoch)
        _, after = load_epoch_graph(local, to_epoch)
    changes = diff_graphs(before, after)
    typer.echo(f"epoch {from_epoch} -> epoch {to_epoch}")
    if changes.is_empty():
        typer.echo("no change")
        return
    for e in changes.appeared:
        typer.echo(f"appeared    {e.source} {e.arrow()} {e.target}")
    for e in changes.vanished:
        typer.echo(f"vanished    {e.source} {e.arrow()} {e.target}")
    for old, new in changes.reoriented:
        typer.echo(f"re-oriented {old.source} {old.arrow()} {old.target}  =>  {new.source} {new.arrow()} {new.target}")


# ---------------------------------------------------------------------------------------------
# wpultr discover
# ---------------------------------------------------------------------------------------------
def _discover_config(config: Path | None, sets: list[str] | None):
    """The run config (file and --set overrides, or defaults): page features, `discovery`, seed, cluster."""
    from ..config import config_from_dict, load_config  # lazy: +0.9 s (pandas, pyarrow)
    overrides = parse_sets(sets, "discovery.ci_test=kci")
    return load_config(config, overrides) if config else config_from_dict(nest(overrides))


DISCOVER = "wpultr discover"     # what --out's epoch_<k>/ may replace: only what this command wrote there


def _discover_target(out: Path, epoch: int, sessions: Path) -> Path:
    """OUT/epoch_<k>, checked before any work (rundir.ownership): refused unless new, inside a run directory or this
    command's own unchanged earlier output, which is then removed for the new one."""
    target = epoch_dir(out, epoch)
    check_output(target, output_of(DISCOVER, in_runs=True), [sessions], "--out")   # --out may be a run: its own
    if target.is_dir() and not any(is_run_dir(parent) for parent in target.parents):
        shutil.rmtree(target)
    return target


@user_errors
def discover_command(
        sessions: Path = typer.Argument(..., help="sessions table: a directory of Parquet partitions"),
        scores: str = typer.Option(..., "--scores", "-s",
                                   help="r̂: a column of the sessions table, or a Parquet file of "
                                        "session_id, position, relevance_score"),
        out: Path = typer.Option(..., "--out", "-o", help="run/output directory (epoch_<k>/ is written under it)"),
        config: Path | None = typer.Option(None, help="run config: data.page_features, discovery, seed, cluster"),
        set_: list[str] | None = typer.Option(None, "--set", help="override: --set discovery.ci_test=rcit"),
        epoch: int = typer.Option(0, "--epoch", "-e", help="epoch k: writes epoch_<k>/ and seeds the sample"),
        encoder: Path | None = typer.Option(None, help="fitted page-feature encoder to reuse (default: fit "
                                                           f"one into OUT/{ENCODER_SUBDIR}/ unless it is there)"),
        scheduler: str | None = typer.Option(None, help="address of an existing Dask scheduler")):
    """Discover the click model's causal graph (BAL §3.1) and its biases from a sessions table."""
    from ..causal.discover_stage import discover_epoch  # lazy: +6.5 s (matplotlib, pandas, pyarrow, scipy, sklearn)
    from ..cluster import open_client  # lazy: +0.9 s (pandas, pyarrow)
    from ..features.encoders import ENCODER_JSON, PageFeatureEncoder  # lazy: +0.9 s (pandas, pyarrow)
    from ..features.preprocess_stage import fit_page_encoder  # lazy: +0.9 s (pandas, pyarrow)
    cfg = _discover_config(config, set_)
    if scheduler:
        cfg.cluster.scheduler = scheduler
    if epoch < 0:
        raise ConfigError(f"--epoch: must be >= 0, got {epoch}")
    if not sessions.is_dir():
        raise FileNotFoundError(f"{sessions}: sessions table directory not found")
    features = cfg.data.parsed_page_features
    target = _discover_target(out, epoch, sessions)
    encoder_dir = encoder or out / ENCODER_SUBDIR
    if encoder is not None and not (encoder / ENCODER_JSON).is_file():
        raise FileNotFoundError(f"--encoder {encoder}: no {ENCODER_JSON} (a directory written by preprocess)")
    if (encoder_dir / ENCODER_JSON).is_file():
        fitted = sorted(f.name for f in PageFeatureEncoder.load(encoder_dir).page_features)
        if fitted != sorted(f.name for f in features):
            raise ConfigError(f"data.page_features: {sorted(f.name for f in features)} declared, but the encoder "
                              f"in {encoder_dir} was fitted for {fitted}; pass --encoder or another --out")
    with open_client(cfg.cluster) as client:
        if not (encoder_dir / ENCODER_JSON).is_file():
            fit_page_encoder(sessions, features, cfg.discovery.preprocess, encoder_dir, client)
            typer.echo(f"fitted page-feature encoder: {encoder_dir}")
        result = discover_epoch(sessions, scores, features, cfg.discovery, out, epoch, encoder_dir=encoder_dir,
                                client=client, seed=cfg.seed)
    if not any(is_run_dir(parent) for parent in target.parents):   # in a run directory its marker proves it
        record(target, DISCOVER)
    typer.echo(f"epoch {epoch}\n{to_text(result.graph)}")
    typer.echo("\n".join(_bias_lines(result.graph)))
    typer.echo(json.dumps({"graph": str(target / GRAPH_FILE), "biases": str(target / BIASES_FILE),
                           "tests": result.graph.meta["pc"]["tests"],
                           "seconds": result.graph.meta["pc"]["seconds"]}))
