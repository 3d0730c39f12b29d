"""wpultr: whole-page unbiased learning to rank (BAL and its baselines) from biased click logs, on Dask."""
import importlib
import os as _os

__version__ = "0.1.0"

# OpenMP threads (torch's CPU ops) that wait for work sleep rather than spin: on a machine whose cores are busy, a
# spinning thread burns the time slices its partner needs to finish the op, and the demo's BERT trained 3x slower
# (issue 32). Read once, when torch loads its OpenMP library, so it is set here, before any wpultr module imports
# torch; a value already in the environment is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The Python API (wpultr/api.py), imported on first use (PEP 562): `import wpultr` stays as light as the package
# root must be (layer 0), and `wpultr --help` loads none of it.
_API = ("run", "open_run", "load_ranker", "config", "export", "Run", "Ranker")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
