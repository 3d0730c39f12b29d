"""Shared fixtures: one real Dask LocalCluster for the whole test session."""
import pytest

from wpultr.config import ClusterConfig
from wpultr.pipeline.cluster import open_client


@pytest.fixture(scope="session")
def dask_client():
    with open_client(ClusterConfig(n_workers=2, threads_per_worker=1, memory_limit="3GiB")) as client:
        yield client
