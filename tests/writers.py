"""Every command that writes a file outside a run directory, as tests drive it (issue 42): the arguments that point
its output at a target, and the spellings of one target path (plain, `..`, a symlinked parent, file://, file://…/..).

Shared by tests/test_ownership.py (every writer × every spelling) and the property test of tests/test_output_safety.py.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

SIM = ["--set", "data.simulate.n_sessions=30", "--set", "data.simulate.n_queries=10",
       "--set", "data.simulate.n_annotated_queries=5"]
SPELLINGS = ("plain", "dotdot", "symlink", "file_url", "file_url_dotdot")


def spell(target: Path, how: str) -> str:
    """`target` written as a user might: through a missing directory and `..`, a symlinked parent (made here, beside
    the target's parent), a file:// URL, or a file:// URL through `..`."""
    target = Path(target)
    if how == "plain":
        return str(target)
    if how == "dotdot":
        return str(target.parent / "not_there" / ".." / target.name)
    if how == "symlink":
        link = target.parent.with_name(target.parent.name + "_link")
        if not link.is_symlink():
            link.symlink_to(target.parent, target_is_directory=True)
        return str(link / target.name)
    if how == "file_url":
        return target.as_uri()
    if how == "file_url_dotdot":
        return (target.parent / "not_there").as_uri() + "/../" + target.name
    raise ValueError(how)


def experiment_yaml(where: Path, out_dir: str) -> Path:
    """An experiment spec (in `where`, with a comment the user would lose) whose out_dir is `out_dir`; run with
    --report-only it writes experiment.yaml, runs.json/csv, tables.md, significance.csv and report.html there."""
    where.mkdir(parents=True, exist_ok=True)
    spec = where / "spec.yaml"
    values = {"name": "own", "out_dir": out_dir, "base": {"data": {"source": "simulate"}},
              "methods": [{"label": "Naive", "overrides": {"train.method": "naive"}}], "seeds": [0]}
    spec.write_text("# my experiment: keep this comment\n" + yaml.safe_dump(values))
    return spec


def _bench_on_path() -> None:
    bench = str(Path(__file__).resolve().parents[1] / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)


def bench_json(target: str) -> tuple[int, str]:
    """bench/outputs' --json as bench/bal.py, discovery.py and methods.py use it: checked first, then written."""
    _bench_on_path()
    import outputs
    try:
        outputs.check_json_output(target)
        outputs.write_json_output(target, {"figures": [1, 2]})
    except SystemExit as stop:
        return 2, str(stop)
    return 0, ""


def bench_out(target: str) -> tuple[int, str]:
    """bench/seed_tables' --out as its drivers use it: checked first, then one JSON line appended (exit code, text)."""
    _bench_on_path()
    import seed_tables
    try:
        path = seed_tables.check_out(target)
        seed_tables.append_record(path, {"seed": 0})
    except SystemExit as stop:
        return 2, str(stop)
    return 0, ""


# name -> (kind, args for the CLI given (target spelled, fixtures)); kind: "file" (the output is a file), "dir"
# (the output directory itself is replaced: export), "children" (files and folders are written into it)
def writer_args(name: str, target: str, ctx: dict[str, Path]) -> list[str] | Callable[[], tuple[int, str]]:
    run, logs = ctx["run"], ctx["logs"]
    if name == "score":
        return ["score", str(run / "ranker"), str(run / "data" / "annotations.parquet"), "--out", target]
    if name == "compare --html":
        return ["compare", str(run), str(ctx["run2"]), "--html", target]
    if name == "graph show --output":
        return ["graph", "show", str(run), "--output", target]
    if name == "identifiability check --figure":
        return ["identifiability", "check", str(run), "--figure", target]
    if name == "export":
        return ["export", str(run), "--out", target]
    if name == "simulate":
        return ["simulate", "--out", target, *SIM]
    if name == "ingest":
        return ["ingest", str(logs / "train" / "part-00000.gz"), "--out", target]
    if name == "experiment":
        return ["experiment", str(experiment_yaml(ctx["specs"] / f"s{abs(hash(target))}", target)),
                "--report-only"]
    if name == "bench --out":
        return lambda: bench_out(target)
    if name == "bench --json":
        return lambda: bench_json(target)
    raise ValueError(name)


WRITERS = {"score": "file", "compare --html": "file", "graph show --output": "file",
           "identifiability check --figure": "file", "bench --out": "file", "bench --json": "file", "export": "dir",
           "simulate": "children", "ingest": "children", "experiment": "children"}
# a file or folder of the user's at the place each writer writes, which the old rule replaced for its type or name
USER_FILE = {"score": "scores.parquet", "compare --html": "page.html", "graph show --output": "graph.txt",
             "identifiability check --figure": "chart.png", "bench --out": "results.jsonl",
             "bench --json": "figures.json"}


def user_files(name: str, target: Path, ctx: dict[str, Path]) -> None:
    """Put the user's own files at `target` for writer `name`: of the type the writer writes, or named as it names
    its files (a `train/` of `part-NNNNN.gz`, `sessions/` of partitions, an `experiment.yaml`, a `report.html`)."""
    import pandas as pd
    target.parent.mkdir(parents=True, exist_ok=True)
    kind = WRITERS[name]
    if name == "score":
        pd.DataFrame({"query_id": ["1"], "score": [0.5]}).to_parquet(target)
    elif name == "compare --html":
        target.write_text("<!-- wpultr compare -->\n<p>my notes</p>\n")
    elif name == "graph show --output":
        target.write_text("epoch 0\nmy notes\n")
    elif name == "identifiability check --figure":
        target.write_bytes(b"\x89PNG\r\n\x1a\nmy chart")
    elif name in ("bench --out", "bench --json"):
        target.write_text('{"mine": 1}\n')
    elif kind == "dir":      # export: a folder of the user's that holds an export.json (no checksums) and more
        target.mkdir()
        (target / "export.json").write_text('{"format": "wpultr.export/1"}')
        (target / "notes.txt").write_text("mine")
    elif name == "simulate":
        (target / "train").mkdir(parents=True)
        for i in range(2):
            (target / "train" / f"part-{i:05d}.gz").write_bytes((ctx["logs"] / "train" / "part-00000.gz").read_bytes())
        (target / "annotations.tsv.gz").write_bytes(b"my annotations")
    elif name == "ingest":
        (target / "sessions").mkdir(parents=True)
        (target / "sessions" / "part-00000-00000.parquet").write_bytes(b"my partition")
    elif name == "experiment":
        target.mkdir(parents=True)
        (target / "experiment.yaml").write_text("# mine\nname: keep\n")
        (target / "report.html").write_text("<p>my report</p>")
    os.sync()
