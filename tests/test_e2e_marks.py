"""The conftest rule that keeps `pytest -m "not e2e"` to unit tests: a test that uses the session's Dask cluster or
starts a LocalCluster without the e2e mark fails, naming the mark; a unit test is untouched."""
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.mark.e2e
def test_a_test_on_a_dask_cluster_without_the_e2e_mark_fails(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_marks='''
        from wpultr.config import ClusterConfig
        from wpultr.cluster import open_client

        def test_unit():
            assert True

        def test_on_the_session_cluster(dask_client):
            assert dask_client is not None

        def test_starting_a_cluster():
            with open_client(ClusterConfig(n_workers=1, threads_per_worker=1)) as client:
                assert client is not None
    ''')
    result = pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_on_the_session_cluster uses the dask_client fixture without the 'e2e' mark*",
                                 "*test_starting_a_cluster started a Dask LocalCluster during the test without the "
                                 "'e2e' mark*"], consecutive=False)
