"""Runs the stages of a config in order inside its run directory, resuming after the last finished stage.

A run_dir given as a URL (s3://…) runs in its local working copy (storage.WorkingCopy): pulled from the
URL first (so a resume on any machine starts from what was synced), pushed after every stage, finished
or failed, with the finished stage's completion record last; remote workers pull before each stage
and push what they wrote after it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..config import ConfigError, RunConfig, config_from_dict, dump_config
from ..storage import WorkingCopy
from . import status
from .cluster import WorkerWatch, open_client, release_worker_memory
from .layout import CONFIG_FILE, MARKER, METRICS, REPORT, STAGES_DIR, SUMMARY_FILE, VERSIONS_FILE
from .rundir import RunDir, package_versions, read_json, write_json, write_text
from .stages import STAGES, Stage, StageContext

log = logging.getLogger(__name__)

@dataclass
class RunResult:
    run_dir: Path
    ran: list[str]
    skipped: list[str]
    metrics: dict[str, Any]
    url: str | None = None      # run_dir as given, when it is a URL (run_dir is then its working copy)

    @property
    def report(self) -> Path:
        return self.run_dir / REPORT


def _check_same_config(run: RunDir, cfg: RunConfig) -> None:
    """Resuming with a different config would mix artifacts of two runs: refuse, naming the keys."""
    existing = run.path(CONFIG_FILE)
    if not existing.exists():
        return
    before = config_from_dict(yaml.safe_load(existing.read_text()))
    if dump_config(before) == dump_config(cfg):
        return
    a, b = yaml.safe_load(dump_config(before)), yaml.safe_load(dump_config(cfg))
    changed = sorted(_diff_keys(a, b))
    raise ConfigError(f"{run.root}: holds a run with a different config (changed: {', '.join(changed)}); "
                      f"use a new run_dir or --fresh to start over")


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return [k for key in keys for k in _diff_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if a != b else []


def run_pipeline(cfg: RunConfig, *, fresh: bool = False, client: Any = None,
                 stages: Sequence[Stage] = STAGES, progress: bool = False) -> RunResult:
    """Run every stage not yet finished; write config.yaml, versions.json, summary.json and metrics.json."""
    copy = WorkingCopy(cfg.run_dir_url, cfg.resolved_run_dir) if cfg.run_dir_url else None
    if fresh:   # only a marked run directory, never one holding the config file or the working directory
        if copy is not None:
            copy.remove(marker=MARKER)   # RunDirError when the URL holds files but no run
        RunDir.remove_fresh(cfg.resolved_run_dir, keep=(cfg.source,))
    if copy is not None:
        copy.pull(marker=MARKER)
    run = RunDir.create(cfg.resolved_run_dir)
    _check_same_config(run, cfg)
    write_text(run.path(CONFIG_FILE), dump_config(cfg))
    write_json(run.path(VERSIONS_FILE), package_versions())
    if copy is not None:
        copy.push(last=(MARKER,))
    if client is None:
        with open_client(cfg.cluster) as own_client:
            return _run_stages(cfg, run, own_client, stages, progress, copy)
    return _run_stages(cfg, run, client, stages, progress, copy)


def _sync(copy: WorkingCopy | None, client: Any, record: str | None = None) -> None:
    """After a stage: remote workers push what they wrote, the working copy takes it, then pushes its
    own changes with the stage's completion record (`record`) last."""
    if copy is None:
        return
    copy.push_from_workers(client)
    copy.pull()
    copy.push(last=(record,) if record else ())


def _run_stages(cfg: RunConfig, run: RunDir, client: Any, stages: Sequence[Stage], progress: bool,
                copy: WorkingCopy | None = None) -> RunResult:
    """Each unfinished stage in order, leaving running/failed records (status.py) and summary.json after each."""
    ran, skipped = [], []
    summary: dict[str, Any] = {"stages": {}}
    ctx = StageContext(config=cfg, run=run, client=client)
    for stage in stages:
        outputs = stage.outputs(cfg)
        if run.is_done(stage.name, outputs):
            skipped.append(stage.name)
            summary["stages"][stage.name] = run.stage_record(stage.name)
            write_json(run.path(SUMMARY_FILE), summary)
            if progress:
                print(f"[wpultr] {stage.name}: done earlier, skipped")
            continue
        if progress:
            print(f"[wpultr] {stage.name} …", flush=True)
        status.mark_running(run.root, stage.name)
        if copy is not None:
            copy.pull_on_workers(client)
            copy.push()     # the running record, so `wpultr status URL` shows the stage running
        try:
            info, seconds = _run_one(ctx, stage, summary)
        except BaseException:
            try:
                _sync(copy, client)     # the failed record and partial outputs; no completion record
            except Exception as sync_error:   # the stage's own error is the one to show
                log.warning("%s: could not sync the failed stage's files: %s", copy.url, sync_error)
            raise
        release_worker_memory(client)   # stages hand each other files: what workers hold now is retained heap
        run.mark_done(stage.name, outputs, seconds, info)
        status.mark_finished(run.root, stage.name)
        summary["stages"][stage.name] = run.stage_record(stage.name)
        write_json(run.path(SUMMARY_FILE), summary)
        _sync(copy, client, f"{STAGES_DIR}/{stage.name}.json")
        ran.append(stage.name)
        if progress:
            print(f"[wpultr] {stage.name}: {seconds:.1f}s {info}", flush=True)
    metrics = read_json(run.path(METRICS)) if run.path(METRICS).exists() else {}
    if copy is not None:
        copy.push()     # summary.json of skipped stages
    return RunResult(run_dir=run.root, ran=ran, skipped=skipped, metrics=metrics,
                     url=copy.url if copy is not None else None)


def _run_one(ctx: StageContext, stage: Stage, summary: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Run one stage (marked running by the caller) under a worker watch; on failure record it (and a lost
    cluster as ClusterError) and re-raise."""
    run = ctx.run
    start = time.perf_counter()
    watch = WorkerWatch(ctx.client, stage.name, ctx.config.cluster.no_worker_timeout)
    try:
        with watch:
            info = stage.run(ctx) or {}
    except BaseException as e:
        error = watch.error or e
        status.mark_failed(run.root, stage.name, error, time.perf_counter() - start)
        summary["failed"] = {"stage": stage.name, "error": f"{type(error).__name__}: {error}"}
        write_json(run.path(SUMMARY_FILE), summary)
        if watch.error is not None:
            raise watch.error from e
        raise
    return info, time.perf_counter() - start
