"""`wpultr graph …`: look at the click-model graphs a run discovered (mounted by the top-level CLI)."""
from __future__ import annotations

import functools
from enum import Enum
from pathlib import Path
from typing import Callable, Optional

import typer

from ..pipeline.rundir import atomic_path
from .biases import identify_biases
from .graph import GraphFileError, diff_graphs, epoch_dir, load_epoch_graph, render, to_dot, to_text

graph_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Inspect the click-model graphs a run discovered (one per epoch).")


class GraphFormat(str, Enum):
    text = "text"
    dot = "dot"
    svg = "svg"
    png = "png"


def _user_errors(fn: Callable) -> Callable:
    """A missing run, epoch or renderer is one clear line and exit code 2, not a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (GraphFileError, RuntimeError) as e:
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None
    return wrapper


def _bias_lines(graph) -> list[str]:
    report = identify_biases(graph)
    lines = ["", f"click parents: {', '.join(report.click_parents) or '(none)'}",
             f"page-feature biases (x -> click): {', '.join(report.page_feature_biases) or '(none)'}"]
    for c in report.confounded:
        lines.append(f"confounded (case {c.case}): {c.feature} <- {', '.join(c.parents)}")
    return lines


@graph_app.command("show")
@_user_errors
def show(run: Path = typer.Argument(..., help="run directory"),
         epoch: Optional[int] = typer.Option(None, "--epoch", "-e", help="epoch to show (default: the latest)"),
         fmt: GraphFormat = typer.Option(GraphFormat.text, "--format", "-f", help="text, dot, svg or png"),
         output: Optional[Path] = typer.Option(None, "--output", "-o",
                                               help="file to write (svg/png default: epoch_<k>/graph.<format>)")):
    """Print an epoch's graph (edges, stabilities, biases) or render it with Graphviz."""
    k, graph = load_epoch_graph(run, epoch)
    if fmt in (GraphFormat.text, GraphFormat.dot):
        body = "\n".join([f"epoch {k}", to_text(graph), *_bias_lines(graph)]) if fmt is GraphFormat.text \
            else to_dot(graph)
        if output is None:
            typer.echo(body)
        else:
            output.write_text(body + "\n")
            typer.echo(str(output))
        return
    target = output or epoch_dir(run, k) / f"graph.{fmt.value}"
    image = render(graph, fmt.value)
    with atomic_path(target) as tmp:
        tmp.write_bytes(image)
    typer.echo(str(target))


@graph_app.command("diff")
@_user_errors
def diff(run: Path = typer.Argument(..., help="run directory"),
         from_epoch: int = typer.Option(..., "--from", help="earlier epoch"),
         to_epoch: int = typer.Option(..., "--to", help="later epoch")):
    """List the edges that appeared, vanished or were re-oriented between two epochs."""
    _, before = load_epoch_graph(run, from_epoch)
    _, after = load_epoch_graph(run, to_epoch)
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
