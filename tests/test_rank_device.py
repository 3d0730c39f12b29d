"""Where a DDP rank trains and how the ranks reduce (methods/training/ranks.rank_device): GPU LOCAL_RANK with NCCL on
CUDA, the CPU with gloo otherwise; the refusals are one line naming the key, in the launcher before any rank starts
and in a rank (its `main`) before its process group. No GPU here: CUDA's presence is each case's argument."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from wpultr.config import RunConfig
from wpultr.errors import ConfigError
from wpultr.methods.training import distributed
from wpultr.methods.training.ranks import RankDevice, fit_data_parallel, local_ranks, rank_device


@pytest.mark.parametrize(("requested", "cuda", "count", "local", "world", "expected"), [
    ("cpu", False, 0, 0, 2, RankDevice("cpu", "gloo")),
    ("cpu", True, 4, 1, 2, RankDevice("cpu", "gloo")),          # the CPU asked for: the GPUs are left alone
    ("auto", False, 0, 1, 2, RankDevice("cpu", "gloo")),
    ("auto", True, 0, 1, 2, RankDevice("cpu", "gloo")),         # CUDA built but no device visible
    ("auto", True, 2, 1, 2, RankDevice("cuda:1", "nccl")),
    ("cuda", True, 4, 0, 2, RankDevice("cuda:0", "nccl")),
    ("cuda", True, 4, 3, 4, RankDevice("cuda:3", "nccl")),
    ("cuda", True, 1, 0, 1, RankDevice("cuda:0", "nccl")),      # one rank per machine (Dask worker, torchrun node)
])
def test_each_rank_takes_its_local_gpu_with_nccl_or_the_cpu_with_gloo(requested, cuda, count, local, world,
                                                                     expected):
    place = rank_device(requested, cuda, count, local, world)
    assert place == expected
    assert place.kind == expected.device.split(":")[0]


@pytest.mark.parametrize("cuda", [False, True])
def test_cuda_without_a_gpu_is_one_line_naming_train_device(cuda):
    with pytest.raises(ConfigError) as error:
        rank_device("cuda", cuda, 0, 0, 2)
    assert str(error.value).startswith("train.device: 'cuda' requested but no CUDA device") \
        and "\n" not in str(error.value)


@pytest.mark.parametrize("requested", ["cuda", "auto"])
def test_more_ranks_on_a_machine_than_gpus_is_one_line_naming_train_processes(requested):
    with pytest.raises(ConfigError) as error:
        rank_device(requested, True, 2, 0, 3)
    message = str(error.value)
    assert message.startswith("train.processes: 3 DDP ranks on one machine need 3 GPUs") and "it has 2" in message
    assert "\n" not in message


def test_dask_ranks_count_their_local_rank_among_the_ranks_on_their_host():
    assert local_ranks(["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.3"]) == [(0, 2), (0, 1), (1, 2), (0, 1)]
    assert local_ranks(["127.0.0.1", "127.0.0.1"]) == [(0, 2), (1, 2)]    # a LocalCluster: as on loopback


def _cfg(device: str, processes: int = 2) -> RunConfig:
    cfg = RunConfig()
    cfg.train.device, cfg.train.processes = device, processes
    return cfg


def test_the_launcher_refuses_cuda_without_a_gpu_before_starting_a_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("wpultr.methods.training.ranks.RankJob.prepare", _no_rank)
    with pytest.raises(ConfigError, match=r"^train\.device: 'cuda' requested"):
        fit_data_parallel(pd.DataFrame(), None, _cfg("cuda"))


def test_the_launcher_refuses_more_ranks_than_this_machines_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr("wpultr.methods.training.ranks.RankJob.prepare", _no_rank)
    with pytest.raises(ConfigError, match=r"^train\.processes: 2 DDP ranks on one machine need 2 GPUs"):
        fit_data_parallel(pd.DataFrame(), None, _cfg("auto"))


def _no_rank(*args, **kwargs):
    raise AssertionError("a rank's job was prepared: the device check came too late")


def test_a_rank_asked_for_cuda_without_a_gpu_exits_with_one_line(tmp_path, monkeypatch, capsys):
    """torchrun's path: the rank refuses before its process group (a torchrun user's ranks, or Dask's on a worker
    without a GPU), one line on stderr and exit code 2, as every wpultr command's bad input."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    (tmp_path / "run.yaml").write_text("train: {device: cuda, processes: 2}\n")
    pd.DataFrame({"session_id": [1]}).to_parquet(tmp_path / "sessions.parquet")
    code = distributed.main([str(tmp_path / "run.yaml"), "--sessions", str(tmp_path / "sessions.parquet"),
                             "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: train.device: 'cuda' requested") and "\n" not in err
