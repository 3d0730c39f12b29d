"""wpultr: whole-page unbiased learning to rank (BAL and its baselines) from biased click logs, on Dask."""
__version__ = "0.1.0"
