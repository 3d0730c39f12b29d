"""Ingest speed and memory: our Dask ingest of Baidu-layout logs against a plain single-process reader.

Builds (once, reused afterwards) a simulated log of at least --gb GB uncompressed in --files gzip
files, then prints for the same run: MB/s and sessions/s of `ingest_baidu` on a LocalCluster with
2 workers and of the obvious Python line reader (gzip.open, split, convert, collect rows, write
Parquet), their ratio, and the peak memory (sum of RSS over this process and its children,
sampled with psutil) of our ingest at 1x and 4x the input (4x = every file linked in 4 times).

    .venv/bin/python bench/ingest.py [--dir /tmp/wpultr-bench-ingest] [--gb 1.0] [--files 8]
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from wpultr.config import ClusterConfig
from wpultr.io.baidu import ingest_baidu
from wpultr.pipeline.cluster import open_client
from wpultr.schema import (BAIDU_BEHAVIOUR_COLUMNS, BAIDU_N_RESULT_FIELDS, BAIDU_RESULT_FIELDS, BAIDU_TOKEN_SEP,
                           baidu_sessions_arrow_schema)

SEED = 20240601
RESULTS_PER_SESSION = 10
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


def build_logs(directory: Path, gb: float, n_files: int) -> dict:
    """The 1x log set (reused when its manifest matches) and the 4x set of links to it."""
    manifest_path = directory / "manifest.json"
    wanted = {"gb": gb, "files": n_files, "seed": SEED}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("params") == wanted:
            return manifest
    shutil.rmtree(directory, ignore_errors=True)
    one = directory / "x1"
    one.mkdir(parents=True)
    per_file = math.ceil(gb * 1e9 / n_files)
    started = time.perf_counter()
    counts = [_write_log_file(one / f"part-{i:05d}.gz", per_file, SEED + i) for i in range(n_files)]
    four = directory / "x4"
    four.mkdir()
    for copy in range(4):
        for i in range(n_files):
            os.link(one / f"part-{i:05d}.gz", four / f"part-{copy}-{i:05d}.gz")
    manifest = {"params": wanted, "bytes": sum(c["bytes"] for c in counts),
                "lines": sum(c["lines"] for c in counts), "sessions": sum(c["sessions"] for c in counts),
                "build_seconds": round(time.perf_counter() - started, 1)}
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return manifest


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------
class PeakRss:
    """Samples the summed RSS of this process and all its descendants in a background thread."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def plain_reader(paths: list[Path], out_dir: Path) -> int:
    """The obvious single-process reader: a line loop per file, rows collected, one Parquet per file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    schema = baidu_sessions_arrow_schema()
    behaviour_index = [(name, _INDEX[name]) for name in BAIDU_BEHAVIOUR_COLUMNS]
    sessions = 0
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
        pq.write_table(pa.Table.from_pydict(columns, schema=schema), out_dir / f"part-{file_index:05d}.parquet")
    return sessions


def measure(label: str, run) -> dict:
    with PeakRss() as rss:
        started = time.perf_counter()
        result = run()
        seconds = time.perf_counter() - started
    return {"label": label, "seconds": seconds, "peak_rss": rss.peak, "result": result}


def ours(paths: list[Path], out_dir: Path, partition_rows: int) -> dict:
    """Time `ingest_baidu` alone (cluster start-up excluded) and the peak RSS including the workers."""
    with open_client(ClusterConfig(n_workers=2, threads_per_worker=1, memory_limit="4GiB")) as client:
        client.run(lambda: None)
        run = measure("ours", lambda: ingest_baidu(paths, out_dir, client, partition_rows))
    shutil.rmtree(out_dir, ignore_errors=True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "wpultr-bench-ingest")
    parser.add_argument("--gb", type=float, default=1.0, help="uncompressed size of the 1x log set")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--partition-rows", type=int, default=200_000)
    args = parser.parse_args()

    manifest = build_logs(args.dir, args.gb, args.files)
    one = sorted((args.dir / "x1").glob("*.gz"))
    four = sorted((args.dir / "x4").glob("*.gz"))
    mb = manifest["bytes"] / 1e6
    print(f"input 1x: {len(one)} gzip files, {mb:.0f} MB uncompressed, "
          f"{sum(p.stat().st_size for p in one) / 1e6:.0f} MB on disk, {manifest['lines']} lines, "
          f"{manifest['sessions']} sessions (built in {manifest.get('build_seconds')} s, reused when present)")

    out = args.dir / "out"
    plain = measure("plain", lambda: plain_reader(one, out / "plain"))
    shutil.rmtree(out / "plain", ignore_errors=True)
    assert plain["result"] == manifest["sessions"], "plain reader lost sessions"
    x1 = ours(one, out / "x1", args.partition_rows)
    x4 = ours(four, out / "x4", args.partition_rows)
    for run, factor in ((x1, 1), (x4, 4)):
        summary = run["result"]
        assert summary.sessions == factor * manifest["sessions"] and summary.quarantined == 0, summary.to_dict()

    def line(run: dict, factor: int) -> str:
        return (f"{run['label']:>5} {factor}x: {run['seconds']:7.1f} s  {factor * mb / run['seconds']:7.1f} MB/s  "
                f"{factor * manifest['sessions'] / run['seconds']:9.0f} sessions/s  "
                f"peak RSS {run['peak_rss'] / 2**20:7.0f} MiB")

    print(line(plain, 1))
    print(line(x1, 1))
    print(line(x4, 4))
    speedup = plain["seconds"] / x1["seconds"]
    memory_ratio = x4["peak_rss"] / x1["peak_rss"]
    print(f"speed-up over the plain reader (1x): {speedup:.2f}x   (target >= 2x: {'met' if speedup >= 2 else 'MISSED'})")
    print(f"peak memory 4x / 1x: {memory_ratio:.2f}   (target <= 1.2: {'met' if memory_ratio <= 1.2 else 'MISSED'})")
    print(f"cores: {psutil.cpu_count()}  load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
