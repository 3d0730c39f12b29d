"""Experiments over methods × seeds (× settings): run on Dask, gathered into the paper's tables and figures."""
from .harness import (Experiment, ExperimentSpec, RunRecord, RunSpec, experiment_from_dict, load_experiment,
                      read_records, run_experiment)

__all__ = ["Experiment", "ExperimentSpec", "RunRecord", "RunSpec", "experiment_from_dict", "load_experiment",
           "read_records", "run_experiment"]
