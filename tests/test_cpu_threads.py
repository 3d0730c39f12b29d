"""BAL's small networks run under a cap on torch's CPU threads, restored afterwards (bal/cpu_threads)."""
import pytest
import torch

from wpultr.bal.cpu_threads import capped, torch_threads
from wpultr.config import config_from_dict
from wpultr.errors import ConfigError


@pytest.mark.parametrize("limit, available, expected", [(None, 16, 16), (4, 16, 4), (4, 2, 2), (0, 8, 1), (1, 1, 1)])
def test_the_cap_never_raises_the_thread_count(limit, available, expected):
    assert capped(limit, available) == expected


def test_threads_are_capped_inside_the_block_and_restored_after_it():
    before = torch.get_num_threads()
    with torch_threads(1) as used:
        assert used == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("a failed fit")
    assert torch.get_num_threads() == before          # restored on an exception too
    with torch_threads(None) as used:
        assert used == before == torch.get_num_threads()


@pytest.mark.parametrize("value", [0, -2, 1.5, "four", True])
def test_a_bad_cpu_threads_names_the_key(value):
    with pytest.raises(ConfigError, match=r"bal\.cpu_threads"):
        config_from_dict({"data": {"source": "simulate"}, "bal": {"cpu_threads": value}})


def test_cpu_threads_defaults_to_four_and_takes_null():
    assert config_from_dict({"data": {"source": "simulate"}}).bal.cpu_threads == 4
    assert config_from_dict({"data": {"source": "simulate"}, "bal": {"cpu_threads": None}}).bal.cpu_threads is None
