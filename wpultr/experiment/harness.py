"""Running an experiment: every (setting, method, seed) of an `Experiment` (see experiment/spec.py) as a Dask task.

Runs go to the cluster as tasks (at most `parallel` at once); inside a worker a task calls
`run_pipeline(cfg, client=worker_client())`, so the run's own data-parallel stages use the same cluster.
A run whose stages are all done with the same config is skipped (resume); a run that raises is recorded
(setting, label, seed, error) and the rest go on. The report is written by the caller (experiment/cli.py
calls report.write_experiment_report), so running never depends on gathering.
"""
from __future__ import annotations

import json
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from distributed import as_completed, worker_client

from ..config import ConfigError, changed_keys, config_from_dict, saved_config, to_dict
from ..pipeline.run_lock import RunLocked
from ..pipeline.runner import run_pipeline
from ..pipeline.stages import STAGES
from ..progress import progress as progress_bar
from ..rundir.files import RunDir, write_text
from ..rundir.layout import CONFIG_FILE
from .spec import (
    EXPERIMENT_FILE,
    EXPERIMENT_OUTPUT,
    FAILURE_FILE,
    RUNS_CSV,
    RUNS_JSON,
    Experiment,
    RunRecord,
    RunSpec,
    slug,
)


def is_finished(spec: RunSpec) -> bool:
    """Every stage of the run is done and its config computes what this experiment's would (`cluster.*` aside)."""
    if spec.config is None:
        return False
    run = RunDir(spec.run_dir)
    config_file = run.path(CONFIG_FILE)
    if not config_file.exists():
        return False
    try:
        cfg = config_from_dict(spec.config)
        if changed_keys(saved_config(config_file), cfg):
            return False
    except (ConfigError, yaml.YAMLError):
        return False
    return all(run.is_done(stage.name, stage.outputs(cfg)) for stage in STAGES)


def run_task(config: dict[str, Any]) -> dict[str, Any]:
    """One run, inside a Dask worker: the pipeline on the worker's own client; never raises."""
    start = time.perf_counter()
    run_dir = Path(config["run_dir"])
    try:
        cfg = config_from_dict(config)
        try:
            with worker_client() as client:
                result = run_pipeline(cfg, client=client)
        except ValueError as e:
            if "worker" not in str(e).lower():   # not inside a worker (local debugging): own cluster
                raise
            result = run_pipeline(cfg)
        failure = run_dir / FAILURE_FILE
        if failure.exists():
            failure.unlink()
        return {"status": "ok", "seconds": time.perf_counter() - start, "ran": result.ran}
    except RunLocked as e:   # another process runs it: its directory is not this task's to write in
        return {"status": "failed", "seconds": time.perf_counter() - start, "error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # a failed run is a result, not the end of the experiment
        message = f"{type(e).__name__}: {e}"
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / FAILURE_FILE).write_text(traceback.format_exc())
        except OSError:
            pass
        return {"status": "failed", "seconds": time.perf_counter() - start, "error": message}


def run_experiment(exp: Experiment, client: Any, *, parallel: int | None = None,
                   progress: Callable[[str], None] | None = None) -> list[RunRecord]:
    """Run every unfinished run of `exp` on `client` (at most `parallel` at once).

    Returns one record per run, in the experiment's order. Records go to `<out_dir>/runs.json` and
    `runs.csv`; the tables, figures and `report.html` are report.write_experiment_report's job.
    """
    say = progress or (lambda line: None)
    exp.out_dir.mkdir(parents=True, exist_ok=True)
    write_resolved_experiment(exp)
    records: dict[tuple[str, str, int], RunRecord] = {}
    todo: deque[RunSpec] = deque()
    for spec in exp.runs:
        if spec.config is None:
            records[spec.key] = RunRecord(spec.setting, spec.label, spec.seed, str(spec.run_dir), "invalid",
                                          error=spec.invalid)
            say(f"invalid  {_run_name(spec)}: {spec.invalid}")
        elif is_finished(spec):
            records[spec.key] = RunRecord(spec.setting, spec.label, spec.seed, str(spec.run_dir), "done")
            say(f"done     {_run_name(spec)} (finished earlier)")
        else:
            todo.append(spec)
    if parallel is None:
        parallel = exp.spec.parallel or max(1, sum(client.nthreads().values()))
    say(f"{len(todo)} run(s) to do, {parallel} at once; {len(records)} skipped")

    by_future: dict[Any, RunSpec] = {}

    def submit(spec: RunSpec) -> Any:
        future = client.submit(run_task, spec.config, pure=False,
                               key=f"wpultr-run-{slug(_run_name(spec))}-{time.time_ns()}")
        by_future[future] = spec
        return future

    bar = progress_bar(total=len(todo), desc=f"experiment {exp.name}", unit="run")
    pending = as_completed([submit(todo.popleft()) for _ in range(min(parallel, len(todo)))])
    for future in pending:
        spec = by_future.pop(future)
        try:
            outcome = future.result()
        except Exception as e:  # a lost worker fails this run only
            outcome = {"status": "failed", "seconds": None, "error": f"{type(e).__name__}: {e}"}
        records[spec.key] = RunRecord(spec.setting, spec.label, spec.seed, str(spec.run_dir), outcome["status"],
                                      outcome.get("seconds"), outcome.get("error"))
        seconds = outcome.get("seconds")
        timing = f" in {seconds:.1f}s" if seconds is not None else ""
        say(f"{outcome['status']:8s} {_run_name(spec)}{timing}"
            + (f": {outcome['error']}" if outcome.get("error") else ""))
        bar.set_postfix(failed=sum(r.status == "failed" for r in records.values()), refresh=False)
        bar.update()
        if todo:
            pending.add(submit(todo.popleft()))
    bar.close()
    ordered = [records[spec.key] for spec in exp.runs]
    write_records(exp, ordered)
    return ordered


def _run_name(spec: RunSpec) -> str:
    return f"{spec.setting}/{spec.label}/seed {spec.seed}"


def write_resolved_experiment(exp: Experiment) -> Path:
    values = to_dict(exp.spec)
    values.update(name=exp.name, out_dir=str(exp.out_dir), base=exp.base)
    path = exp.out_dir / EXPERIMENT_FILE
    write_text(path, yaml.safe_dump(values, sort_keys=False), EXPERIMENT_OUTPUT, "out_dir")
    return path


def write_records(exp: Experiment, records: Sequence[RunRecord]) -> None:
    rows = [vars(r) for r in records]
    write_text(exp.out_dir / RUNS_JSON, json.dumps(rows, indent=2) + "\n", EXPERIMENT_OUTPUT, "out_dir")
    write_text(exp.out_dir / RUNS_CSV, pd.DataFrame(rows, columns=list(RunRecord.__dataclass_fields__))
               .to_csv(index=False), EXPERIMENT_OUTPUT, "out_dir")


def read_records(exp: Experiment) -> list[RunRecord]:
    """The records of the last `run_experiment`, or, for runs it does not list, their state on disk."""
    path = exp.out_dir / RUNS_JSON
    saved = {}
    if path.exists():
        for row in json.loads(path.read_text()):
            saved[(row["setting"], row["label"], row["seed"])] = RunRecord(**row)
    records = []
    for spec in exp.runs:
        if spec.config is None:
            records.append(RunRecord(spec.setting, spec.label, spec.seed, str(spec.run_dir), "invalid",
                                     error=spec.invalid))
        elif is_finished(spec):
            old = saved.get(spec.key)
            records.append(RunRecord(spec.setting, spec.label, spec.seed, str(spec.run_dir), "done",
                                     old.seconds if old else None))
        else:
            old = saved.get(spec.key)
            error = old.error if old and old.status == "failed" else "not run yet"
            records.append(RunRecord(spec.setting, spec.label, spec.seed, str(spec.run_dir), "failed", error=error))
    return records
