"""Experiments over methods × seeds (× settings): run on Dask, gathered into the paper's tables and figures."""
from .harness import read_records, run_experiment
from .spec import Experiment, ExperimentSpec, RunRecord, RunSpec, experiment_from_dict, load_experiment

__all__ = ["Experiment", "ExperimentSpec", "RunRecord", "RunSpec", "experiment_from_dict", "load_experiment",
           "read_records", "run_experiment"]
