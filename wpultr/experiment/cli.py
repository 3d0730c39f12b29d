"""`wpultr experiment CONFIG`: the command function; wpultr/cli.py registers it with
`app.command("experiment")(experiment)`."""
from __future__ import annotations

from pathlib import Path

import typer

from ..cli_support import parse_sets, user_errors


@user_errors
def experiment(config: Path = typer.Argument(..., help="experiment YAML (see pipelines/reproduce/)"),
               scheduler: str | None = typer.Option(None, help="address of an existing Dask scheduler (default: "
                                                                  "a LocalCluster as the base config's cluster section "
                                                                  "says)"),
               workers: int | None = typer.Option(None, help="LocalCluster workers "
                                                                "(default: base cluster.n_workers)"),
               parallel: int | None = typer.Option(None, help="runs at once (default: the experiment's `parallel`, "
                                                                 "else the cluster's worker threads)"),
               set_: list[str] | None = typer.Option(None, "--set",
                                                        help="override an experiment key: "
                                                             "--set seeds=[0,1] --set base.train.epochs=1"),
               report_only: bool = typer.Option(False, "--report-only", help="run nothing; gather the runs on disk "
                                                                             "into the tables, figures and report")):
    """Run methods × seeds (× settings) as Dask tasks, each in its own run directory (finished runs are
    skipped), then write Tables 1–3 (Markdown + CSV), Figs. 3–5 (PNG) and report.html."""
    from .harness import (  # lazy: +0.9 s (pandas, pyarrow)
        read_records,
        run_experiment,
        write_records,
        write_resolved_experiment,
    )
    from .report import write_experiment_report  # lazy: +0.9 s (pandas, pyarrow)
    from .spec import load_experiment  # lazy: +0.9 s (pandas, pyarrow)
    exp = load_experiment(config, parse_sets(set_, "seeds=[0,1] or base.train.epochs=1"))
    from .report import check_outputs  # lazy: +0.9 s (pandas, pyarrow)
    check_outputs(exp, config)        # before any run: out_dir's files that are the user's are never replaced
    if report_only:
        exp.out_dir.mkdir(parents=True, exist_ok=True)
        write_resolved_experiment(exp)
        records = read_records(exp)
        write_records(exp, records)
    else:
        from ..cluster import open_client  # lazy: +0.9 s (pandas, pyarrow)
        from ..config import ClusterConfig, config_from_dict  # lazy: +0.9 s (pandas, pyarrow)
        base_cluster = config_from_dict({k: v for k, v in exp.base.items() if k == "cluster"}).cluster
        cluster = ClusterConfig(scheduler=scheduler or base_cluster.scheduler,
                                n_workers=workers or base_cluster.n_workers,
                                threads_per_worker=base_cluster.threads_per_worker,
                                memory_limit=base_cluster.memory_limit,
                                connect_timeout=base_cluster.connect_timeout)
        with open_client(cluster) as client:
            records = run_experiment(exp, client, parallel=parallel,
                                     progress=lambda line: typer.echo(f"[experiment] {line}"))
    path = write_experiment_report(exp, records)
    from .report import CLAIMS_MD  # lazy: +0.9 s (pandas, pyarrow)
    claims = (exp.out_dir / CLAIMS_MD).read_text().strip()
    if claims:
        typer.echo(claims)
    failed = [r for r in records if not r.succeeded]
    typer.echo(f"{len(records) - len(failed)} of {len(records)} runs finished"
               + (f"; {len(failed)} failed or invalid (listed in the report)" if failed else ""))
    typer.echo(f"experiment directory: {exp.out_dir}")
    typer.echo(f"report: {path}")
