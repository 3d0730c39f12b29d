"""bench/gpu.py, the prepared GPU script: its `--smoke` run on the CPU measures every part and writes the JSON, its own
time limit cuts a run with what it measured kept, and the device's bf16 peak is read from its name."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_smoke_run_measures_every_part_and_writes_its_json(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "bench/gpu.py", "--smoke", "--out", str(out)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["smoke"] and not results["timed_out"] and results["device"] == "cpu"
    ranker = results["ranker"]["precisions"]
    assert set(ranker) == {"fp32", "bf16"} and [ranker[p]["precision"] for p in ("fp32", "bf16")] == ["fp32", "bf16"]
    for entry in ranker.values():   # tokens counted at the encoder's input: 10 inputs a session, each up to 32
        assert entry["sessions_per_s"] > 0 and 10 <= entry["tokens_per_session"] <= 320
        assert entry["model_tflops"] == pytest.approx(6 * entry["parameters"] * entry["tokens_per_s"] / 1e12)
    speedup = ranker["bf16"]["sessions_per_s"] / ranker["fp32"]["sessions_per_s"]
    assert results["bf16_over_fp32"] == pytest.approx(speedup)
    bal = results["bal"]["methods"]
    assert set(bal) == {"Naive", "BAL"} and bal["BAL"]["steps"] and set(bal["BAL"]["steps"]) >= {"graph", "ranker"}
    ratio = bal["BAL"]["sessions_per_s"] / bal["Naive"]["sessions_per_s"]
    assert results["bal"]["bal_over_naive"] == pytest.approx(ratio)
    printed = run.stdout
    assert "target >= 3.00x" in printed and "target >= 0.80x" in printed and "no published bf16 peak" in printed


def test_its_own_time_limit_keeps_what_was_measured(tmp_path, capsys, one_torch_thread):
    bench = load_bench_script("gpu")
    out = tmp_path / "gpu.json"
    assert bench.main(["--smoke", "--out", str(out), "--timeout", "0.01", "--parts", "ranker"]) == 124
    results = json.loads(out.read_text())
    assert results["timed_out"] and "ranker" not in results and results["seconds"] < 30
    assert "timed out after" in capsys.readouterr().out


def test_the_peak_is_named_from_the_device(monkeypatch):
    bench = load_bench_script("gpu")
    cuda = torch.device("cuda")
    for name, expected in [("NVIDIA H200", ("NVIDIA H200 SXM", 989.4)),
                           ("NVIDIA H100 80GB HBM3", ("NVIDIA H100 SXM", 989.4)),
                           ("NVIDIA H100 PCIe", ("NVIDIA H100 PCIe", 756.5)),
                           ("NVIDIA A100-SXM4-80GB", ("NVIDIA A100", 312.0)),
                           ("Tesla T4", (None, None))]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        assert bench.peak_for(cuda) == expected, name
    assert bench.peak_for(torch.device("cpu")) == (None, None)
