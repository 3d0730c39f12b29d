"""Shared fixtures: one real Dask LocalCluster for the whole test session."""
import pytest
import torch

from wpultr.cluster import open_client
from wpultr.config import ClusterConfig


@pytest.fixture(scope="session")
def dask_client():
    with open_client(ClusterConfig(n_workers=2, threads_per_worker=1, memory_limit="3GiB")) as client:
        yield client


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small torch fits run faster (and steadier) on one thread than contending for two."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
