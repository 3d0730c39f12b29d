"""Runs the stages of a config in order inside its run directory, resuming after the last finished stage.

A run_dir given as a URL (s3://…) runs in its local working copy (storage.WorkingCopy): pulled from the
URL first (so a resume on any machine starts from what was synced), pushed after every stage, finished
or failed, with the finished stage's completion record last; remote workers pull before each stage
and push what they wrote after it. One run per run directory at a time (run_lock.py); a resume may change where
it runs (`cluster.*`), never what it computes.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cluster import WorkerWatch, dask_messages_to, n_workers, open_client, release_worker_memory, scheduler_address
from ..config import ConfigError, RunConfig, changed_keys, check_machine, dump_config, saved_config, to_dict
from ..report.text import stage_line
from ..rundir.files import RunDir, package_versions, read_json, write_json, write_text
from ..rundir.layout import CLUSTER_LOG, CONFIG_FILE, MARKER, METRICS, REPORT, STAGES_DIR, SUMMARY_FILE, VERSIONS_FILE
from ..storage import WorkingCopy
from . import status
from .run_lock import run_lock
from .stages import STAGES, Stage, StageContext, check_inputs

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


def _check_same_config(run: RunDir, cfg: RunConfig) -> bool:
    """Whether `run` already holds a config; ConfigError, naming the keys, when it differs from `cfg` in what it
    computes (resuming would mix artifacts of two runs). Where it runs (`cluster.*`) may change."""
    existing = run.path(CONFIG_FILE)
    if not existing.exists():
        return False
    changed = changed_keys(saved_config(existing), cfg)
    if changed:
        raise ConfigError(f"{run.root}: holds a run with a different config (changed: {', '.join(changed)}); "
                          f"use a new run_dir or --fresh to start over")
    return True


def run_pipeline(cfg: RunConfig, *, fresh: bool = False, client: Any = None,
                 stages: Sequence[Stage] = STAGES, progress: bool = False) -> RunResult:
    """Run every stage not yet finished; write config.yaml, versions.json, summary.json and metrics.json.

    The run directory is locked for the whole run (run_lock): a second run on it stops at once, before --fresh
    deletes anything. config.yaml keeps the first run's config (a resume may change only `cluster.*`); each stage's
    completion record says which cluster ran it.
    """
    check_machine(cfg, own_cluster=client is None)
    root = RunDir.checked_root(cfg.resolved_run_dir)
    ingest = next((s for s in stages if s.name == "ingest"), None)
    if ingest is not None and (fresh or cfg.run_dir_url or not RunDir(root).is_done(ingest.name, ingest.outputs(cfg))):
        check_inputs(cfg)    # a missing input names its key before anything is written or a cluster starts
    with run_lock(root):
        copy = WorkingCopy(cfg.run_dir_url, root) if cfg.run_dir_url else None
        if fresh:   # only a marked run directory, never one holding the config file or the working directory
            if copy is not None:
                copy.remove(marker=MARKER)   # RunDirError when the URL holds files but no run
            RunDir.remove_fresh(root, keep=(cfg.source,))
        if copy is not None:
            copy.pull(marker=MARKER)
        run = RunDir.create(root)
        if not _check_same_config(run, cfg):
            write_text(run.path(CONFIG_FILE), dump_config(cfg))
        write_json(run.path(VERSIONS_FILE), package_versions())
        if copy is not None:
            copy.push(last=(MARKER,))
        with dask_messages_to(run.path(CLUSTER_LOG)):      # Dask's warnings in the run directory, not the terminal
            if client is None:
                with open_client(cfg.cluster) as own_client:
                    return _run_stages(cfg, run, own_client, stages, progress, copy)
            return _run_stages(cfg, run, client, stages, progress, copy)


def _cluster_used(cfg: RunConfig, client: Any) -> dict[str, Any]:
    """The cluster a stage ran on, for its completion record: the settings and the scheduler and workers it had."""
    return {**to_dict(cfg.cluster), "address": scheduler_address(client), "workers": _workers(client)}


def _workers(client: Any) -> int | None:
    try:
        return n_workers(client)
    except Exception:  # a record of where it ran, not a reason to fail a finished stage
        return None


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
        run.mark_done(stage.name, outputs, seconds, info, cluster=_cluster_used(cfg, client))
        status.mark_finished(run.root, stage.name)
        summary["stages"][stage.name] = run.stage_record(stage.name)
        write_json(run.path(SUMMARY_FILE), summary)
        _sync(copy, client, f"{STAGES_DIR}/{stage.name}.json")
        ran.append(stage.name)
        if progress:
            print(stage_line(stage.name, seconds, info), flush=True)
    metrics = read_json(run.path(METRICS)) if run.path(METRICS).exists() else {}
    if copy is not None:
        copy.push()     # summary.json of skipped stages
    return RunResult(run_dir=run.root, ran=ran, skipped=skipped, metrics=metrics,
                     url=copy.url if copy is not None else None)


# One stage at a time per process: torch's global RNG (dropout, the methods' and encoders' seeds) belongs to the
# process, so two runs whose stages ran at once in one process (an experiment's run tasks secede their Dask worker
# threads and can share a worker) would interleave its draws and neither would be reproducible. A run waiting here
# sits in a seceded thread and holds no worker slot, so the stage it waits for can still use the cluster.
_STAGE_LOCK = threading.Lock()


@contextmanager
def _one_stage_at_a_time() -> Iterator[None]:
    if not _STAGE_LOCK.acquire(blocking=False):
        log.info("another run in this process is inside a stage; waiting for it (one stage per process at a time)")
        _STAGE_LOCK.acquire()
    try:
        yield
    finally:
        _STAGE_LOCK.release()


def _run_one(ctx: StageContext, stage: Stage, summary: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Run one stage (marked running by the caller) under a worker watch; on failure record it (and a lost
    cluster as ClusterError) and re-raise."""
    run = ctx.run
    start = time.perf_counter()
    watch = WorkerWatch(ctx.client, stage.name, ctx.config.cluster.no_worker_timeout)
    try:
        with watch, _one_stage_at_a_time():
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
