"""How `wpultr run pipelines/bal.yaml` scales with the number of sessions: seconds and peak memory per stage.

For each of --sizes it builds (once, reused afterwards) a simulated log in the Baidu-ULTR layout of that
many sessions, runs `wpultr run pipelines/bal.yaml` on it (the config's defaults: the MLP backbone, its inputs
streamed from the partitions, `train.streaming`) in a
child process with a fresh run directory, and prints per stage: the seconds (the runner's own record,
`stages/<stage>.json`), the peak RSS of the process tree (the `wpultr` process, its Dask scheduler and
workers: RSS summed over the tree, sampled every 100 ms with psutil from this process, each sample
credited to the stage whose `stages/<stage>.running` record exists at that moment; shared library pages
count once per process, so the figure errs high), then the ratios between the largest and the smallest
size. Results also go to <dir>/results.json.

Why Baidu-layout files and not `data.source: simulate`: the pipeline then runs as it does on real logs
(Baidu ingest, lexical featurisation of the token ids), and the ingest stage measures reading logs rather
than the simulator generating them in the driver's memory. The logs are written one 50 000-session
chunk at a time from one simulated world (`wpultr.simulate.generate`), so building 2 M sessions never
holds them all in memory; the annotation file is the simulator's for the same world.

    .venv/bin/python bench/scale.py [--sizes 500000 2000000] [--dir /tmp/wpultr-bench-scale]
                                   [--set train.epochs=1 ...]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from wpultr.io.baidu_writer import write_baidu_annotations, write_baidu_sessions
from wpultr.pipeline.stages import STAGES
from wpultr.rundir.layout import STAGES_DIR
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.generate import CHUNK_SESSIONS, _session_chunk, simulation_engine

REPO = Path(__file__).resolve().parents[1]
SEED = 20250113
LOG_LAYOUT = 1                 # bump when the generated files change, so a stale set is rebuilt
SAMPLE_SECONDS = 0.1
OUTSIDE = "(between stages)"   # start-up, cluster, shutdown: no stage's running record exists


# ---------------------------------------------------------------------------------------------
# The logs
# ---------------------------------------------------------------------------------------------
def build_logs(directory: Path, n_sessions: int) -> Path:
    """Baidu-layout train/part-*.gz and annotations.tsv.gz of `n_sessions` sessions; reused when they match."""
    manifest = directory / "manifest.json"
    wanted = {"n_sessions": n_sessions, "seed": SEED, "layout": LOG_LAYOUT}
    if manifest.exists() and json.loads(manifest.read_text()) == wanted:
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "train").mkdir(parents=True)
    cfg = SimulateConfig(n_sessions=n_sessions)
    start = time.perf_counter()
    engine = simulation_engine(cfg, SEED)
    queries = engine.rngs["queries"].choice(engine.corpus.n_queries, size=n_sessions, p=engine.corpus.popularity)
    for i, first in enumerate(range(0, n_sessions, CHUNK_SESSIONS)):
        chunk = _session_chunk(first, queries[first:first + CHUNK_SESSIONS], engine.corpus, cfg, engine.model,
                               engine.context_scales, engine.rngs)
        write_baidu_sessions(chunk.session_table, directory / "train" / f"part-{i:05d}.gz")
    # the same world's annotated queries: the corpus and annotation streams do not depend on n_sessions
    annotations = simulate(dataclasses.replace(cfg, n_sessions=1), SEED).annotation_table
    write_baidu_annotations(annotations, directory / "annotations.tsv.gz")
    manifest.write_text(json.dumps(wanted))
    print(f"[scale] wrote {n_sessions} sessions to {directory} in {time.perf_counter() - start:.0f} s", flush=True)
    return directory


# ---------------------------------------------------------------------------------------------
# One measured run
# ---------------------------------------------------------------------------------------------
def _tree_rss(process: psutil.Process) -> int:
    total = 0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):   # ended, or not ours to read
            total += p.memory_info().rss
    return total


def _running_stage(run_dir: Path) -> str:
    records = sorted((run_dir / STAGES_DIR).glob("*.running")) if (run_dir / STAGES_DIR).is_dir() else []
    return records[0].name[:-len(".running")] if records else OUTSIDE


def measure(logs: Path, run_root: Path, name: str, sets: list[str]) -> dict:
    """Run the pipeline on `logs` in a child process; seconds and peak tree RSS (bytes) per stage, wall time."""
    run_dir = run_root / name
    command = [str(Path(sys.executable).with_name("wpultr")), "run", str(REPO / "pipelines" / "bal.yaml"),
               "--fresh", "--set", f"name={name}", "--set", f"run_dir={run_root}/{{name}}",
               "--set", f'data.train=["{logs}/train/*.gz"]', "--set", f"data.annotations={logs}/annotations.tsv.gz"]
    for item in sets:
        command += ["--set", item]
    peaks: dict[str, int] = {}
    log_path = run_root / f"{name}.log"
    run_root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log_path, "w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
        process = psutil.Process(child.pid)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                stage, rss = _running_stage(run_dir), _tree_rss(process)
                peaks[stage] = max(peaks.get(stage, 0), rss)
                done.wait(SAMPLE_SECONDS)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = child.wait()
        done.set()
        sampler.join()
    wall = time.perf_counter() - start
    if code != 0:
        tail = log_path.read_text().splitlines()[-15:]
        raise SystemExit(f"[scale] {name}: wpultr run exited {code}; last lines of {log_path}:\n" + "\n".join(tail))
    seconds = {}
    for stage in STAGES:
        record = run_dir / STAGES_DIR / f"{stage.name}.json"
        seconds[stage.name] = json.loads(record.read_text())["seconds"] if record.exists() else None
    return {"wall_seconds": round(wall, 1), "seconds": seconds, "peak_rss": peaks,
            "peak_rss_all": max(peaks.values(), default=0)}


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------
def _gb(n: int | None) -> str:
    return "-" if not n else f"{n / 2**30:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{b / a:.2f}"


def print_table(results: dict[int, dict]) -> None:
    sizes = sorted(results)
    small, large = sizes[0], sizes[-1]
    head = f"{'stage':<18}" + "".join(f"{f's@{n}':>12}{f'GB@{n}':>11}" for n in sizes)
    if len(sizes) > 1:
        head += f"{'s ratio':>9}{'GB ratio':>10}"
    print(head)
    rows = [s.name for s in STAGES] + [OUTSIDE]
    for stage in rows:
        line = f"{stage:<18}"
        for n in sizes:
            sec = results[n]["seconds"].get(stage)
            line += f"{'-' if sec is None else f'{sec:.1f}':>12}{_gb(results[n]['peak_rss'].get(stage)):>11}"
        if len(sizes) > 1:
            line += f"{_ratio(results[small]['seconds'].get(stage), results[large]['seconds'].get(stage)):>9}"
            line += f"{_ratio(results[small]['peak_rss'].get(stage), results[large]['peak_rss'].get(stage)):>10}"
        print(line)
    line = f"{'whole run':<18}"
    for n in sizes:
        line += f"{results[n]['wall_seconds']:>12.1f}{_gb(results[n]['peak_rss_all']):>11}"
    if len(sizes) > 1:
        line += f"{_ratio(results[small]['wall_seconds'], results[large]['wall_seconds']):>9}"
        line += f"{_ratio(results[small]['peak_rss_all'], results[large]['peak_rss_all']):>10}"
    print(line)
    if len(sizes) > 1:
        print(f"sessions ratio {large / small:g}; seconds = the stage's own record (whole run: wall clock of the "
              f"child), GB = peak RSS of the process tree")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500_000, 2_000_000], help="sessions per run")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/wpultr-bench-scale"), help="logs and run dirs")
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="extra `wpultr run --set` override (repeatable), e.g. train.epochs=1")
    args = parser.parse_args(argv)
    results = {}
    for n in sorted(set(args.sizes)):
        logs = build_logs(args.dir / "logs" / f"n{n}", n)
        print(f"[scale] running pipelines/bal.yaml on {n} sessions …", flush=True)
        results[n] = measure(logs, args.dir / "runs", f"scale_{n}", args.sets)
        print(f"[scale] {n} sessions: {results[n]['wall_seconds']:.0f} s, peak {_gb(results[n]['peak_rss_all'])} GB",
              flush=True)
        # after every size, so a later size that fails (hours in) leaves the earlier ones' figures
        (args.dir / "results.json").write_text(json.dumps({"sizes": results, "sets": args.sets}, indent=2) + "\n")
        print_table(results)


if __name__ == "__main__":
    main()
