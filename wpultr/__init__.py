"""wpultr: whole-page unbiased learning to rank (BAL and its baselines) from biased click logs, on Dask."""
import os as _os

__version__ = "0.1.0"

# OpenMP threads (torch's CPU ops) that wait for work sleep rather than spin: on a machine whose cores are busy, a
# spinning thread burns the time slices its partner needs to finish the op, and the demo's BERT trained 3x slower
# (issue 32). Read once, when torch loads its OpenMP library, so it is set here, before any wpultr module imports
# torch; a value already in the environment is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
