"""Starting DDP ranks and collecting what they leave: N subprocesses on this machine (loopback), or N tasks on a
Dask cluster's workers, one rank per worker (`cluster.scheduler` / `--scheduler`). Each rank is
`python -m wpultr.methods.training.distributed` (its `main`) with torchrun's environment variables; rank 0 writes
the ranker, history and graphs into the job's directory. Every rank's log is kept (`keep_rank_logs`: the train
stage keeps them in the run directory, `train/ranks/rank<k>.log`), and a failed rank is one error naming its log.
Where a rank trains and how the ranks reduce (`rank_device`: GPU `LOCAL_RANK` with NCCL, or the CPU with gloo) is
decided from `train.device` and the machine's GPUs, in each rank and, for ranks on this machine, before they start.
"""
from __future__ import annotations

import ctypes
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ...cluster import current_client
from ...config import dump_config
from ...errors import ClusterError, ConfigError, WpultrError
from ...rankers.base import NO_CUDA
from ...rankers.registry import load_ranker
from ..base import FitResult
from .checkpoint import current

if TYPE_CHECKING:
    from ...config import RunConfig

RANK_ENTRY = "wpultr.methods.training.distributed"   # the module every rank runs (`python -m`)
HISTORY_FILE = "history.json"
GRAPHS_FILE = "graphs.json"
RANKER_SUBDIR = "ranker"
RANK_LOG = "rank{rank}.log"

_rank_logs: ContextVar[Path | None] = ContextVar("wpultr_rank_logs", default=None)


@dataclass(frozen=True)
class RankDevice:
    """Where one DDP rank trains and the torch.distributed backend the ranks reduce with."""

    device: str      # "cpu" or "cuda:<LOCAL_RANK>"
    backend: str     # "gloo" (CPU tensors) or "nccl" (CUDA tensors, one rank per GPU)

    @property
    def kind(self) -> str:
        """`cpu` or `cuda`: what every rank's `train.device` becomes (the same on all, so is their checkpoint key)."""
        return self.device.split(":")[0]


def rank_device(requested: str, cuda_available: bool, device_count: int, local_rank: int, local_world: int
                ) -> RankDevice:
    """The device and backend of the rank `local_rank` of the `local_world` ranks on one machine, for `train.device:
    requested` (cpu | cuda | auto) on a machine with `device_count` visible GPUs: on CUDA, GPU `local_rank` and NCCL;
    on the CPU, gloo. NCCL refuses two ranks on one GPU, so more local ranks than GPUs is a ConfigError naming
    `train.processes`; `cuda` without a GPU is the in-process one (`resolve_device`), naming `train.device`."""
    cuda = cuda_available and device_count > 0
    if requested == "cpu" or (requested == "auto" and not cuda):
        return RankDevice("cpu", "gloo")
    if not cuda:
        raise ConfigError(NO_CUDA)
    if local_world > device_count:
        raise ConfigError(f"train.processes: {local_world} DDP ranks on one machine need {local_world} GPUs (NCCL "
                          f"runs one rank per GPU) and it has {device_count}; run at most {device_count} ranks per "
                          "machine, or set train.device: cpu")
    return RankDevice(f"cuda:{local_rank}", "nccl")


def local_ranks(hosts: list[str]) -> list[tuple[int, int]]:
    """Each rank's (LOCAL_RANK, LOCAL_WORLD_SIZE), torchrun's meaning, for ranks on `hosts` (rank k on `hosts[k]`):
    its place among the ranks on its host and how many share that host."""
    return [(hosts[:rank].count(host), hosts.count(host)) for rank, host in enumerate(hosts)]


@contextmanager
def keep_rank_logs(directory: str | Path) -> Iterator[None]:
    """Within this block, DDP fits copy their ranks' logs (`rank<k>.log`) into `directory` when they end, failed or
    not: the train stage passes the run's `train/ranks/`, so a failed rank's traceback outlives its temporary job."""
    token = _rank_logs.set(Path(directory))
    try:
        yield
    finally:
        _rank_logs.reset(token)


def write_rank_table(frame: pd.DataFrame, path: Path) -> tuple[str, ...]:
    """Write `frame` for the ranks to read back; the names of its Arrow list columns (`pd.ArrowDtype`, as the train
    stage reads the token and feature lists), which a rank reads as Arrow again (`io.parquet.read_table`).

    pandas records an Arrow column's dtype by its string ('list<element: int32>[pyarrow]') in the file's pandas
    metadata, and pandas 3 cannot parse that string back (`TypeError: data type ... not understood`): those
    columns' entries are left out of the metadata, so they read as plain Arrow lists."""
    arrow = tuple(str(c) for c, dtype in frame.dtypes.items() if isinstance(dtype, pd.ArrowDtype))
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    if arrow and b"pandas" in meta:
        pandas_meta = json.loads(meta[b"pandas"])
        pandas_meta["columns"] = [c for c in pandas_meta.get("columns", []) if c.get("name") not in arrow]
        meta[b"pandas"] = json.dumps(pandas_meta).encode()
        table = table.replace_schema_metadata(meta)
    pq.write_table(table, path)
    return arrow


@dataclass
class RankJob:
    """One data-parallel fit's directory (config, tables, what rank 0 writes) and the command every rank runs."""

    work: Path
    command: list[str]
    world: int
    workers: list[str] = field(default_factory=list)   # the Dask workers the ranks ran on, in rank order

    @classmethod
    def prepare(cls, work: Path, sessions: pd.DataFrame | str | Path, valid: pd.DataFrame | None, cfg: RunConfig,
                world: int, overrides: dict[str, Any] | None = None) -> RankJob:
        arrow: tuple[str, ...] = ()
        if isinstance(sessions, pd.DataFrame):
            arrow = write_rank_table(sessions, work / "sessions.parquet")
            sessions = work / "sessions.parquet"
        (work / "config.yaml").write_text(dump_config(cfg))
        command = [sys.executable, "-m", RANK_ENTRY, str(work / "config.yaml"), "--sessions", str(sessions),
                   "--out", str(work)]
        if arrow:
            command += ["--arrow-lists", ",".join(arrow)]
        if overrides:
            np.savez(work / "overrides.npz", **{k: np.asarray(v) for k, v in overrides.items()})
            command += ["--overrides", str(work / "overrides.npz")]
        checkpoint = current()      # the train stage's: rank 0 writes it after each epoch, every rank resumes from it
        if checkpoint is not None:
            command += ["--checkpoint", str(checkpoint.path), "--checkpoint-key", checkpoint.key]
        if valid is not None and len(valid):
            write_rank_table(valid, work / "valid.parquet")
            command += ["--valid", str(work / "valid.parquet")]
        return cls(work, command, world)

    def log(self, rank: int) -> Path:
        return self.work / RANK_LOG.format(rank=rank)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on this machine now, bound on `host` ('' for every interface: a rendezvous other hosts reach)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


SCHEDULER_ENV = "WPULTR_RANK_SCHEDULER"   # the run's Dask scheduler, for the work rank 0 spreads over it (discovery)


def rank_env(rank: int, world: int, address: str, port: int, threads: int,
             scheduler: str | None = None, local: tuple[int, int] | None = None) -> dict[str, str]:
    """torchrun's environment for rank `rank` of `world`, `local` its (LOCAL_RANK, LOCAL_WORLD_SIZE) (default: all
    ranks on this machine); OMP_NUM_THREADS as the user set it, else `threads`; the run's scheduler address
    (`scheduler_address`), which rank 0 connects to for BAL's discovery."""
    local_rank, local_world = local if local is not None else (rank, world)
    env = {**os.environ, "MASTER_ADDR": address, "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
           "LOCAL_WORLD_SIZE": str(local_world), "RANK": str(rank), "LOCAL_RANK": str(local_rank),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
    if scheduler:
        env[SCHEDULER_ENV] = scheduler
    return env


def scheduler_address(client: Any = None) -> str | None:
    """The address of the run's Dask scheduler (`client`'s, else this process's current client's), if any."""
    if client is None:
        client = current_client()
    try:
        return str(client.scheduler.address) if client is not None and client.scheduler is not None else None
    except AttributeError:
        return None


def rank_client() -> Any:
    """In a rank: a Dask client of the run's scheduler (`SCHEDULER_ENV`), or None when the fit had none."""
    from distributed import Client  # lazy: Dask is optional in process (bench/gpu.py)
    address = os.environ.get(SCHEDULER_ENV)
    if not address:
        return None
    return Client(address, set_as_default=False)


# ---------------------------------------------------------------------------------------------
def fit_data_parallel(sessions: pd.DataFrame | str | Path, valid: pd.DataFrame | None, cfg: RunConfig,
                      processes: int | None = None, overrides: dict[str, Any] | None = None) -> FitResult:
    """Train with `processes` (default `train.processes`) DDP ranks: subprocesses on loopback, or, with
    `cluster.scheduler`, one task per Dask worker of that cluster (`run_on_dask`). `overrides`: per-row columns that
    replace the partitions' (a streamed BAL's identifiability pre-flight merges). A rank's failure stops the
    others and raises one line naming the rank and its kept log."""
    n = processes or cfg.train.processes
    client = _scheduler_client(cfg)
    if client is None:   # the ranks run here: refuse a device this machine lacks before starting them
        rank_device(cfg.train.device, torch.cuda.is_available(), torch.cuda.device_count(), 0, n)
    parent = _rank_logs.get()
    # with a cluster the workers read the job's files: beside the run's files (a path they share), not in /tmp
    base = parent.parent if client is not None and parent is not None else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wpultr-ddp-", dir=base) as tmp:
        job = RankJob.prepare(Path(tmp), sessions, valid, cfg, n, overrides)
        try:
            failure = run_on_dask(client, job, cfg) if client is not None else run_local(job)
        finally:
            kept = _keep_logs(job, parent)
        if failure is not None:
            rank, line = failure
            where = kept.get(rank, job.log(rank))
            raise WpultrError(f"train.processes: DDP rank {rank} of {n} failed: {line} (its log: {where})")
        saved = json.loads((job.work / HISTORY_FILE).read_text())
        graphs = []
        if (job.work / GRAPHS_FILE).exists():
            from ...causal.graph import DiscoveredGraph  # lazy: causal-learn is optional for a Naive fit (bench/gpu.py)
            graphs = [DiscoveredGraph.from_dict(g) for g in json.loads((job.work / GRAPHS_FILE).read_text())]
        bias = {**saved["bias"], "processes": n}
        if job.workers:
            bias["rank_workers"] = job.workers
        return FitResult(load_ranker(job.work / RANKER_SUBDIR).eval(), saved["history"], bias, graphs)


def _keep_logs(job: RankJob, directory: Path | None) -> dict[int, Path]:
    if directory is None:
        return {}
    directory.mkdir(parents=True, exist_ok=True)
    kept = {}
    for rank in range(job.world):
        if job.log(rank).exists():
            kept[rank] = directory / job.log(rank).name
            shutil.copyfile(job.log(rank), kept[rank])
    return kept


def last_line(log: Path) -> str:
    """The last line a rank wrote (its error, when it failed)."""
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return lines[-1] if lines else "no output"


def run_local(job: RankJob) -> tuple[int, str] | None:
    """The ranks as subprocesses of this one on loopback (so it works inside a Dask worker too); the first failed
    rank and its last line, or None."""
    threads = max(1, (os.cpu_count() or 1) // job.world)
    port, scheduler = free_port(), scheduler_address()
    ranks = []
    for rank in range(job.world):
        with open(job.log(rank), "wb") as log:      # the rank writes through its own descriptor; ours closes here
            ranks.append((subprocess.Popen(job.command, env=rank_env(rank, job.world, "127.0.0.1", port, threads,
                                                                     scheduler),
                                           stdout=log, stderr=subprocess.STDOUT), log))
    failed = _wait(ranks)
    if failed is None:
        return None
    code = ranks[failed][0].returncode
    if code < 0:      # a signal: its log ends wherever the rank was, so say what ended it
        return failed, f"killed by {signal.Signals(-code).name} (last output: {last_line(job.log(failed))})"
    return failed, last_line(job.log(failed))


def _wait(ranks: list[tuple[subprocess.Popen, Any]]) -> int | None:
    """Wait for every rank; the first that fails ends the others (they would wait on it). Its rank, or None."""
    try:
        while True:
            codes = [p.poll() for p, _ in ranks]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                for p, _ in ranks:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                return bad[0]
            if all(c == 0 for c in codes):
                return None
            time.sleep(0.05)
    finally:
        for p, log in ranks:
            if p.poll() is None:       # interrupted (Ctrl-C, a task cancelled): no rank outlives its fit
                p.kill()
                p.wait()
            log.close()


# ---------------------------------------------------------------------------------------------
def _scheduler_client(cfg: RunConfig) -> Any:
    """The run's Dask client when the ranks go to an existing cluster (`cluster.scheduler`), else None."""
    from distributed import Client  # lazy: Dask is optional in process (bench/gpu.py)
    if cfg.cluster.scheduler is None:
        return None
    client = current_client()
    if client is None or client.scheduler is None or client.scheduler.address != _normal(cfg.cluster.scheduler):
        client = Client(cfg.cluster.scheduler, timeout=cfg.cluster.connect_timeout, set_as_default=False)
    return client


def _normal(address: str) -> str:
    return address if "://" in address else f"tcp://{address}"


def rank_workers(client: Any, cfg: RunConfig, world: int) -> list[dict[str, Any]]:
    """`world` workers for the ranks, one each, in a stable order: those named in `cluster.rank_workers` (names or
    addresses) and holding `cluster.rank_resources` (e.g. {GPU: 1}); ClusterError when there are too few."""
    info = client.scheduler_info(n_workers=-1)["workers"] if _takes_n_workers(client) else \
        client.scheduler_info()["workers"]
    wanted = set(cfg.cluster.rank_workers or ())
    need = cfg.cluster.rank_resources or {}
    found = []
    for address, worker in sorted(info.items(), key=lambda kv: str(kv[1].get("name", kv[0]))):
        if wanted and address not in wanted and str(worker.get("name")) not in wanted:
            continue
        if any(worker.get("resources", {}).get(k, 0) < v for k, v in need.items()):
            continue
        found.append({"address": address, "name": str(worker.get("name", address)),
                      "nthreads": int(worker.get("nthreads", 1))})
    if len(found) < world:
        which = (f" named in cluster.rank_workers {sorted(wanted)}" if wanted else "") + \
                (f" with cluster.rank_resources {need}" if need else "")
        raise ClusterError(f"train.processes: {world} ranks need {world} Dask workers{which}, one rank each; the "
                           f"cluster at {client.scheduler.address} has {len(found)}")
    return found[:world]


def _takes_n_workers(client: Any) -> bool:
    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _die_with_parent() -> None:
    """In a rank's process before it runs (Linux): SIGKILL when the process that started it dies, so a rank never
    outlives its lost Dask worker (or its killed launcher)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def _rank_task(command: list[str], env: dict[str, str], log: str, out: str | None, stop: str) -> dict[str, Any]:
    """One rank, run on a Dask worker as a subprocess (its own process: torch's process group and global state
    stay out of the worker); its exit code, its log and, for rank 0, the files it wrote (ranker, history). The
    client sets the Dask Event `stop` when the fit failed elsewhere: the rank is killed then, not left running."""
    from distributed import Event, secede  # lazy: Dask is optional in process (bench/gpu.py)
    secede()      # the rank waits here in its own process: the worker's thread pool serves other tasks (discovery)
    stopped = Event(stop)
    with open(log, "wb") as handle:
        rank = subprocess.Popen(command, env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        while rank.poll() is None:
            if stopped.is_set():
                rank.kill()
            with suppress(subprocess.TimeoutExpired):
                rank.wait(timeout=0.5)
    code = rank.returncode
    files = {}
    if out is not None and code == 0:
        root = Path(out)
        for name in (HISTORY_FILE, GRAPHS_FILE):
            if (root / name).exists():
                files[name] = (root / name).read_bytes()
        for path in (root / RANKER_SUBDIR).rglob("*"):
            if path.is_file():
                files[str(path.relative_to(root))] = path.read_bytes()
    return {"code": code, "log": Path(log).read_bytes(), "files": files}


def _worker_port() -> tuple[str, int]:
    """This worker's host and a port free on it: the rendezvous of rank 0, which runs here."""
    from distributed import get_worker  # lazy: Dask is optional in process (bench/gpu.py)
    return _host(get_worker().address), free_port("")


def _host(address: str) -> str:
    """The host of a Dask worker's address ('tcp://10.0.0.5:40123' -> '10.0.0.5')."""
    return address.split("://")[-1].rsplit(":", 1)[0]


def run_on_dask(client: Any, job: RankJob, cfg: RunConfig) -> tuple[int, str] | None:
    """The ranks as tasks on `job.world` workers of the client's cluster, one each (`rank_workers`); the rendezvous
    is rank 0's worker's host at a port the client asks that worker for. A task that fails, or a worker that leaves,
    ends the fit: the others are cancelled (their ranks fail on the lost peer) and the first failure is returned."""
    from distributed import Event  # lazy: Dask is optional in process (bench/gpu.py)
    workers = rank_workers(client, cfg, job.world)
    job.workers = [w["address"] for w in workers]
    local = local_ranks([_host(w["address"]) for w in workers])   # a worker's GPU: its place among its host's ranks
    stop = f"wpultr-stop-{job.work.name}"
    host, port = client.submit(_worker_port, workers=[workers[0]["address"]], allow_other_workers=False,
                               pure=False).result()
    futures = []
    for rank, worker in enumerate(workers):
        env = {k: v for k, v in rank_env(rank, job.world, host, port, worker["nthreads"],
                                         scheduler_address(client), local[rank]).items()
               if k not in os.environ or os.environ[k] != v}
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", str(worker["nthreads"]))
        futures.append(client.submit(_rank_task, job.command, env, str(job.log(rank)),
                                     str(job.work) if rank == 0 else None, stop, workers=[worker["address"]],
                                     allow_other_workers=False, resources=cfg.cluster.rank_resources or None,
                                     pure=False, retries=0, key=f"wpultr-rank-{rank}-{job.work.name}"))
    stopped = Event(stop, client=client)
    try:
        failure = _wait_tasks(client, futures, workers, job)
    except BaseException:
        stopped.set()
        raise
    if failure is not None:         # the other ranks are killed where they run, then their tasks end
        stopped.set()
        client.cancel([f for f in futures if not f.done()])
    return failure


def _still_gone(client: Any, address: str) -> bool:
    """`address` is missing from the scheduler's workers a second later too (not a passing gap in its report)."""
    time.sleep(1.0)
    return address not in client.scheduler_info()["workers"]


def _wait_tasks(client: Any, futures: list[Any], workers: list[dict[str, Any]], job: RankJob
                ) -> tuple[int, str] | None:
    grace = False
    results: dict[int, dict[str, Any]] = {}    # each finished rank's result, fetched once

    def result(rank: int) -> dict[str, Any]:
        if rank not in results:
            results[rank] = futures[rank].result()
            job.log(rank).write_bytes(results[rank]["log"])
        return results[rank]
    while True:
        alive = set(client.scheduler_info()["workers"]) if not all(f.done() for f in futures) else None
        for rank, future in enumerate(futures):   # a lost worker first: the other ranks then fail on their lost peer
            gone = alive is not None and workers[rank]["address"] not in alive and \
                _still_gone(client, workers[rank]["address"])
            if (future.status == "pending" and gone) or (
                    future.status == "error" and type(future.exception()).__name__ == "KilledWorker"):
                return rank, (f"Dask worker {workers[rank]['name']} ({workers[rank]['address']}) was lost mid-fit; "
                              "run again to resume")
        failed = [r for r, f in enumerate(futures) if f.status == "error" or (
            f.status == "finished" and result(r)["code"] != 0)]
        if failed and alive is not None and not grace:   # a rank that failed on a lost peer: name the lost worker
            grace = True
            time.sleep(2.0)
            continue
        for rank, future in enumerate(futures):
            if future.status == "error":
                return rank, f"{type(future.exception()).__name__}: {future.exception()} on worker " \
                             f"{workers[rank]['name']}"
            if future.status == "finished" and result(rank)["code"] != 0:
                return rank, last_line(job.log(rank))
        if all(f.status == "finished" for f in futures):
            for rank in range(len(futures)):
                result(rank)
            for name, data in result(0)["files"].items():
                (job.work / name).parent.mkdir(parents=True, exist_ok=True)
                (job.work / name).write_bytes(data)
            return None
        time.sleep(0.2)
