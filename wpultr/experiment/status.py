"""Where an experiment stands: the state of every run it expands to, read from its directory alone.

`wpultr status DIR` reads an experiment directory here and a run directory with pipeline/status.py.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import read_yaml_mapping
from ..errors import WpultrError
from ..pipeline.status import RunStatus, run_status, run_summary
from .spec import EXPERIMENT_FILE, RUNS_JSON, experiment_from_dict


@dataclass
class ExperimentRun:
    key: str                        # setting/label/seed N
    state: str                      # a RunStatus state, or invalid
    run: RunStatus | None = None
    error: str | None = None


@dataclass
class ExperimentStatus:
    path: str
    name: str | None
    runs: list[ExperimentRun] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.runs:
            counts[r.state] = counts.get(r.state, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": "experiment", "counts": self.counts()}


def experiment_status(path: str | Path) -> ExperimentStatus:
    """The status of every run of the experiment directory `path`, in the experiment's order.

    The run list comes from the resolved `experiment.yaml` (so runs not started yet are listed);
    when it cannot be read, from the run directories under `runs/`.
    """
    root = Path(path)
    name, runs = None, []
    expected = _expected_runs(root)
    if expected is not None:
        name, specs = expected
        for key, run_dir, invalid in specs:
            if invalid:
                runs.append(ExperimentRun(key, "invalid", error=invalid))
            else:
                status = run_status(run_dir)
                runs.append(ExperimentRun(key, status.state, status))
    else:
        for run_dir in sorted(p.parent for p in (root / "runs").glob("**/config.yaml")):
            status = run_status(run_dir)
            runs.append(ExperimentRun(str(run_dir.relative_to(root / "runs")), status.state, status))
    return ExperimentStatus(str(root), name, runs)


def _expected_runs(root: Path) -> tuple[str, list[tuple[str, Path, str | None]]] | None:
    """(name, [(setting/label/seed N, run directory under `root`, invalid reason)]) from experiment.yaml."""
    try:
        values = read_yaml_mapping(root / EXPERIMENT_FILE, "experiment")
        exp = experiment_from_dict(values)
    except (OSError, WpultrError, ValueError):
        return None
    specs = []
    for spec in exp.runs:
        try:   # the directory may have moved since: locate runs relative to where it is now
            run_dir = root / spec.run_dir.relative_to(exp.out_dir)
        except ValueError:
            run_dir = spec.run_dir
        specs.append((f"{spec.setting}/{spec.label}/seed {spec.seed}", run_dir, spec.invalid))
    return exp.name, specs


def is_experiment_dir(path: Path) -> bool:
    return (path / EXPERIMENT_FILE).is_file() or (path / RUNS_JSON).is_file()


def format_experiment_status(status: ExperimentStatus) -> str:
    """Human-readable lines: one per run of an experiment."""
    counts = status.counts()
    order = ("finished", "running", "failed", "died", "incomplete", "not started", "invalid")
    tally = ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k))
    lines = [f"experiment {status.path}" + (f" ({status.name})" if status.name else "")
             + f": {len(status.runs)} runs" + (f": {tally}" if tally else "")]
    width = max((len(r.key) for r in status.runs), default=0)
    for r in status.runs:
        detail = r.error if r.state == "invalid" else (run_summary(r.run) if r.run else "")
        lines.append(f"  {r.key:<{width}s}  {r.state:<11s} {detail}".rstrip())
    return "\n".join(lines)
