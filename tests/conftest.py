"""Shared fixtures: one real Dask LocalCluster for the whole test session; and the rule that keeps
`pytest -m "not e2e"` to unit tests: a test that uses or starts a Dask cluster without the e2e mark fails."""
import pytest
import torch

from wpultr import cluster
from wpultr.cluster import open_client
from wpultr.config import ClusterConfig

E2E = "e2e"


def _unmarked_cluster(item: pytest.Item, when: str, started: int) -> None:
    """Fail `item` when it is not marked e2e but started a LocalCluster (`open_client`) during `when`."""
    if item.get_closest_marker(E2E) is None and cluster.local_clusters_started > started:
        pytest.fail(f"{item.nodeid} started a Dask LocalCluster during {when} without the {E2E!r} mark: mark it "
                    f"@pytest.mark.{E2E} (an end-to-end test), or keep the unit test off the cluster", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if "dask_client" in item.fixturenames and item.get_closest_marker(E2E) is None:
        pytest.fail(f"{item.nodeid} uses the dask_client fixture without the {E2E!r} mark: mark it "
                    f"@pytest.mark.{E2E}", pytrace=False)
    started = cluster.local_clusters_started
    result = yield
    _unmarked_cluster(item, "setup", started)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    started = cluster.local_clusters_started
    result = yield
    _unmarked_cluster(item, "the test", started)
    return result


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


@pytest.fixture(scope="session")
def case_runs(tmp_path_factory, dask_client):
    """The finished run of each export case (export_roundtrip.CASES), built on first use."""
    from export_roundtrip import CaseRuns
    return CaseRuns(tmp_path_factory.mktemp("case_runs"), dask_client)
