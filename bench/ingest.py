"""Ingest speed and memory: our Dask ingest of Baidu-layout logs against a plain single-process reader.

Builds (once, reused afterwards) a simulated log of at least --gb GB uncompressed in --files gzip
files, and a 4x log set with as many files, each four times as large (four gzip members: the 1x file
written four times), so 4x tests "bounded memory whatever the file size", not just more files.
Then it prints, all from the same run:

- MB/s (uncompressed) and sessions/s of the plain reader (the obvious single-process Python line
  reader: gzip.open, split on tabs, convert every field `ingest_baidu` keeps, collect rows, write
  one Parquet file per input file) and of `ingest_baidu` on a LocalCluster of --workers workers,
  and their ratio;
- the peak memory of our ingest at 1x and 4x, and their ratio.

Every measured run happens in a fresh child process, so no run inherits another's heap (a Python
process rarely gives freed memory back). Peak memory = the largest sum of RSS over that child and
all its descendants (the Dask scheduler lives in the child, the workers are its descendants),
sampled every 50 ms with psutil from this parent process; shared library pages are counted once
per process, so the figure errs high. Times cover the read itself: cluster start-up is excluded
and printed separately, as is the memory of the idle cluster before the ingest starts. The CPU
seconds of the timed part (whole process tree) are printed too: on a shared machine other work
slows the wall-clock figures, much less the work done per CPU-second.

    .venv/bin/python bench/ingest.py [--dir /tmp/wpultr-bench-ingest] [--gb 1.0] [--files 8]
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from wpultr.io.baidu import ingest_baidu
from wpultr.schema import (BAIDU_BEHAVIOUR_COLUMNS, BAIDU_N_RESULT_FIELDS, BAIDU_RESULT_FIELDS, BAIDU_TOKEN_SEP,
                           baidu_sessions_arrow_schema)

SEED = 20240601
RESULTS_PER_SESSION = 10
LOG_LAYOUT = 2               # bump when the generated files change, so a stale set is rebuilt
COPIES = 4                   # the "4x" input
RESULT_PREFIX = "BENCH-RESULT "
_INDEX = {name: i for i, name in enumerate(BAIDU_RESULT_FIELDS) if name}
_FIRST_TAIL_FIELD = _INDEX["media_type"]  # result fields from here on are generated per line


# ---------------------------------------------------------------------------------------------
# The simulated log: a pool of documents and queries, sessions drawn from them
# ---------------------------------------------------------------------------------------------
def _token_text(rng: np.random.Generator, low: int, high: int) -> str:
    return BAIDU_TOKEN_SEP.join(map(str, rng.integers(1, 30_000, rng.integers(low, high))))


def _write_log_file(path: Path, target_bytes: int, seed: int) -> dict[str, int]:
    """Write one gzip log of about `target_bytes` uncompressed bytes; return its counts."""
    rng = np.random.default_rng(seed)
    docs = [f"{rng.bytes(16).hex()}\t{_token_text(rng, 8, 30)}\t{_token_text(rng, 40, 120)}" for _ in range(5000)]
    queries = [_token_text(rng, 2, 8) for _ in range(2000)]
    numbers = [f"{x:.1f}" for x in rng.gamma(2.0, 60.0, 4096)] + ["-"] * 1024
    written = lines = sessions = 0
    tmp = path.with_name(f".{path.name}.tmp")
    with gzip.open(tmp, "wb", compresslevel=1) as out:
        while written < target_bytes:
            block = []
            doc_ids = rng.integers(0, len(docs), (1000, RESULTS_PER_SESSION))
            query_ids = rng.integers(0, len(queries), 1000)
            clicks = rng.random((1000, RESULTS_PER_SESSION)) < 0.2
            media = rng.integers(0, 4, (1000, RESULTS_PER_SESSION))
            behaviour = rng.integers(0, len(numbers), (1000, RESULTS_PER_SESSION, len(BAIDU_BEHAVIOUR_COLUMNS)))
            for s in range(1000):
                block.append(f"{query_ids[s]}\t{queries[query_ids[s]]}\t")
                for r in range(RESULTS_PER_SESSION):
                    tail = ["-"] * (BAIDU_N_RESULT_FIELDS - _FIRST_TAIL_FIELD)
                    tail[0], tail[1] = str(media[s, r]), "1" if clicks[s, r] else "0"
                    for k, name in enumerate(BAIDU_BEHAVIOUR_COLUMNS):
                        tail[_INDEX[name] - _FIRST_TAIL_FIELD] = numbers[behaviour[s, r, k]]
                    # fields 0..3: position, then url_md5, title and abstract from the document pool
                    block.append(f"{r + 1}\t{docs[doc_ids[s, r]]}\t" + "\t".join(tail))
            text = ("\n".join(block) + "\n").encode()
            out.write(text)
            written += len(text)
            lines += len(block)
            sessions += 1000
    os.replace(tmp, path)
    return {"bytes": written, "lines": lines, "sessions": sessions}


def _write_repeated(source: Path, target: Path, copies: int) -> None:
    """`target` = `copies` gzip members, each the whole of `source`: copies x the lines of one file."""
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as out:
        for _ in range(copies):
            with open(source, "rb") as part:
                shutil.copyfileobj(part, out, 16 << 20)
    os.replace(tmp, target)


def build_logs(directory: Path, gb: float, n_files: int) -> dict:
    """The 1x log set and the 4x set (same file count, each file 4x as large); reused when the manifest matches."""
    manifest_path = directory / "manifest.json"
    wanted = {"gb": gb, "files": n_files, "seed": SEED, "layout": LOG_LAYOUT}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("params") == wanted:
            return manifest
    shutil.rmtree(directory, ignore_errors=True)
    one, four = directory / "x1", directory / "x4"
    one.mkdir(parents=True)
    four.mkdir()
    per_file = math.ceil(gb * 1e9 / n_files)
    started = time.perf_counter()
    counts = []
    for i in range(n_files):
        name = f"part-{i:05d}.gz"
        counts.append(_write_log_file(one / name, per_file, SEED + i))
        _write_repeated(one / name, four / name, COPIES)
    manifest = {"params": wanted, "bytes": sum(c["bytes"] for c in counts),
                "lines": sum(c["lines"] for c in counts), "sessions": sum(c["sessions"] for c in counts),
                "build_seconds": round(time.perf_counter() - started, 1)}
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return manifest


# ---------------------------------------------------------------------------------------------
# The two readers, each run in a child process of its own
# ---------------------------------------------------------------------------------------------
def _rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_info().rss
    except psutil.Error:  # gone meanwhile
        return 0


def tree_rss(root: psutil.Process) -> int:
    """Summed RSS of `root` and all its descendants."""
    try:
        return sum(_rss(p) for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def tree_cpu(root: psutil.Process) -> float:
    """CPU seconds (user + system) used so far by `root` and its live descendants."""
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def plain_reader(paths: list[Path], out_dir: Path) -> dict:
    """The obvious single-process reader: a line loop per file, rows collected, one Parquet per file.

    It parses the same fields into the same schema as `ingest_baidu` but validates nothing beyond
    what int() and float() reject, so the comparison, if anything, favours it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    schema = baidu_sessions_arrow_schema()
    behaviour_index = [(name, _INDEX[name]) for name in BAIDU_BEHAVIOUR_COLUMNS]
    sessions = rows = 0
    for file_index, path in enumerate(paths):
        columns: dict[str, list] = {name: [] for name in schema.names}
        session_id = query_id = query_tokens = None
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) == 3:
                    session_id = (file_index << 40) | sessions
                    sessions += 1
                    query_id = int(fields[0])
                    query_tokens = [int(t) for t in fields[1].split(BAIDU_TOKEN_SEP)]
                    continue
                columns["session_id"].append(session_id)
                columns["query_id"].append(query_id)
                columns["position"].append(int(fields[0]))
                columns["click"].append(int(fields[5]))
                columns["doc_id"].append(fields[1])
                columns["query_tokens"].append(query_tokens)
                columns["title_tokens"].append([int(t) for t in fields[2].split(BAIDU_TOKEN_SEP)])
                columns["abstract_tokens"].append([int(t) for t in fields[3].split(BAIDU_TOKEN_SEP)])
                columns["media_type"].append(int(fields[4]))
                for name, i in behaviour_index:
                    columns[name].append(float("nan") if fields[i] in ("-", "") else float(fields[i]))
        table = pa.Table.from_pydict(columns, schema=schema)
        rows += table.num_rows
        pq.write_table(table, out_dir / f"part-{file_index:05d}.parquet")
    return {"sessions": sessions, "results": rows}


def _child_plain(spec: dict) -> dict:
    me = psutil.Process()
    started, cpu = time.perf_counter(), tree_cpu(me)
    counts = plain_reader([Path(p) for p in spec["paths"]], Path(spec["out"]))
    return {"seconds": time.perf_counter() - started, "cpu_seconds": tree_cpu(me) - cpu, **counts}


def _child_ours(spec: dict) -> dict:
    """Start the cluster, warm its workers, then time `ingest_baidu` alone.

    The cluster helpers are imported here, not at the top: spawned Dask workers re-run this
    script's top level, and wpultr.config pulls in the heavy modeling stack, which the ingest
    tasks themselves never import.
    """
    from wpultr.config import ClusterConfig
    from wpultr.pipeline.cluster import open_client

    started = time.perf_counter()
    cluster = ClusterConfig(n_workers=spec["workers"], threads_per_worker=1, memory_limit="4GiB")
    with open_client(cluster) as client:
        client.run(lambda: None)
        startup = time.perf_counter() - started
        me = psutil.Process()
        idle_rss = tree_rss(me)
        started, cpu = time.perf_counter(), tree_cpu(me)
        summary = ingest_baidu(spec["paths"], spec["out"], client, spec["partition_rows"])
        seconds, cpu = time.perf_counter() - started, tree_cpu(me) - cpu
    return {"seconds": seconds, "cpu_seconds": cpu, "startup_seconds": startup, "idle_rss": idle_rss,
            "sessions": summary.sessions, "results": summary.results, "quarantined": summary.quarantined,
            "partitions": summary.partitions, "bytes_uncompressed": summary.bytes_uncompressed}


_CHILDREN = {"plain": _child_plain, "ours": _child_ours}


def child_main(spec_json: str) -> None:
    """Entry point of a measured child: run one reader, print its result as one JSON line."""
    spec = json.loads(spec_json)
    result = _CHILDREN[spec["reader"]](spec)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# Measuring from the parent
# ---------------------------------------------------------------------------------------------
class PeakRss:
    """Samples the summed RSS of process `pid` and its descendants in a background thread.

    The process list is refreshed only every `rescan` seconds (walking /proc costs far more than
    reading one process's RSS), so the sampler takes little of the CPU it is measuring on.
    """

    def __init__(self, pid: int, interval: float = 0.05, rescan: float = 1.0):
        self.root = psutil.Process(pid)
        self.interval = interval
        self.rescan = rescan
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _processes(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return []

    def _run(self) -> None:
        processes, scanned = self._processes(), time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() - scanned > self.rescan:
                processes, scanned = self._processes(), time.monotonic()
            self.peak = max(self.peak, sum(_rss(p) for p in processes))
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def measure(label: str, spec: dict) -> dict:
    """Run one reader in a fresh child process; its result plus the peak RSS of the child's process tree."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with PeakRss(proc.pid) as rss:
        stdout, stderr = proc.communicate()
    shutil.rmtree(spec["out"], ignore_errors=True)
    results = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not results:
        raise RuntimeError(f"{label}: child exited with {proc.returncode}\n{stderr[-4000:]}")
    return {"label": label, "peak_rss": rss.peak, "load": os.getloadavg()[0],
            **json.loads(results[-1][len(RESULT_PREFIX):])}


def _check(run: dict, factor: int, manifest: dict) -> None:
    """Both readers must have produced every session and row of the input (all of it read), nothing quarantined."""
    sessions = factor * manifest["sessions"]
    results = factor * (manifest["lines"] - manifest["sessions"])
    size = factor * manifest["bytes"]
    got = (run["sessions"], run["results"], run.get("quarantined", 0), run.get("bytes_uncompressed", size))
    if got != (sessions, results, 0, size):
        raise AssertionError(f"{run['label']} {factor}x: (sessions, rows, quarantined, bytes) = {got}, "
                             f"expected ({sessions}, {results}, 0, {size})")


def _mib(n: float) -> str:
    return f"{n / 2**20:6.0f} MiB"


def report(manifest: dict, plain: dict, x1: dict, x4: dict, workers: int) -> None:
    """Print the figures; the targets are judged on wall-clock speed and on whole-tree peak RSS."""
    mb = manifest["bytes"] / 1e6

    def line(run: dict, factor: int) -> str:
        text = (f"{run['label']:>5} {factor}x: {run['seconds']:6.1f} s  {factor * mb / run['seconds']:6.1f} MB/s  "
                f"{factor * manifest['sessions'] / run['seconds']:7.0f} sessions/s  "
                f"CPU {run['cpu_seconds']:6.1f} s ({factor * mb / run['cpu_seconds']:5.1f} MB/CPU-s)  "
                f"peak RSS {_mib(run['peak_rss'])}  load {run['load']:.1f}")
        if "idle_rss" in run:
            text += f"  [idle cluster {_mib(run['idle_rss'])}, start-up {run['startup_seconds']:.1f} s untimed]"
        return text

    print(line(plain, 1))
    print(line(x1, 1))
    print(line(x4, COPIES))
    speedup = plain["seconds"] / x1["seconds"]
    cpu_ratio = plain["cpu_seconds"] / x1["cpu_seconds"]
    memory_ratio = x4["peak_rss"] / x1["peak_rss"]
    above_idle = (x4["peak_rss"] - x4["idle_rss"]) / max(1, x1["peak_rss"] - x1["idle_rss"])
    print(f"speed ratio ours/plain at 1x, wall clock ({workers} workers vs 1 process): {speedup:.2f}x   "
          f"(target >= 2x: {'met' if speedup >= 2 else 'MISSED'})   [per CPU-second: {cpu_ratio:.2f}x]")
    print(f"peak memory {COPIES}x / 1x: {memory_ratio:.2f}   "
          f"(target <= 1.2: {'met' if memory_ratio <= 1.2 else 'MISSED'})   [above the idle cluster: {above_idle:.2f}]")
    print(f"cores: {psutil.cpu_count()}; 'load' = 1-minute load average at the end of each run "
          f"(other work on the machine slows the wall-clock figures, not the CPU-second ones)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "wpultr-bench-ingest")
    parser.add_argument("--gb", type=float, default=1.0, help="uncompressed size of the 1x log set")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partition-rows", type=int, default=200_000)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one measured reader
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return

    manifest = build_logs(args.dir, args.gb, args.files)
    one = [str(p) for p in sorted((args.dir / "x1").glob("*.gz"))]
    four = [str(p) for p in sorted((args.dir / "x4").glob("*.gz"))]
    mb = manifest["bytes"] / 1e6
    print(f"input 1x: {len(one)} gzip files, {mb:.0f} MB uncompressed, "
          f"{sum(Path(p).stat().st_size for p in one) / 1e6:.0f} MB on disk, {manifest['lines']} lines, "
          f"{manifest['sessions']} sessions; {COPIES}x: {len(four)} files of {COPIES}x the size "
          f"(built in {manifest.get('build_seconds')} s, reused when present)")
    if mb < 1000:
        print("note: below the 1 GB the requirement asks for (--gb 1.0 or more)")

    out = args.dir / "out"
    ours = {"reader": "ours", "workers": args.workers, "partition_rows": args.partition_rows}
    plain = measure("plain", {"reader": "plain", "paths": one, "out": str(out / "plain")})
    x1 = measure("ours", {**ours, "paths": one, "out": str(out / "x1")})
    x4 = measure("ours", {**ours, "paths": four, "out": str(out / "x4")})
    for run, factor in ((plain, 1), (x1, 1), (x4, COPIES)):
        _check(run, factor, manifest)
    report(manifest, plain, x1, x4, args.workers)


if __name__ == "__main__":
    main()
