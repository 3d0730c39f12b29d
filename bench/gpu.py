"""The GPU's figures in one command (issue 43): what mixed precision and BAL's device-side steps buy on a GPU.

(1) ranker: the BERT-base ranker (hidden 768, 12 layers, 12 heads, intermediate 3072, built from a BertConfig: no
    download; sdpa attention) trained by wpultr's own step — `build_ranker`, the shared `Trainer`, `Naive.fit_trainer`
    (shuffled session batches, the click loss, Adam), as bench/bert_throughput.py's product path — on its synthetic
    sessions (10 results, inputs up to 128 tokens), one epoch at a time, in `train.precision` fp32 and bf16 (and fp16
    where asked), and fp32 with TF32 matrix products as a reference (no `train.precision` value: fp32 means fp32);
(2) utilisation: model FLOP/s = 6 × parameters (the encoder and head the score reads) × tokens/s (the encoder's own
    input tokens, counted at its embedding layer: each batch runs up to its longest input), against the device's
    published dense bf16 peak (`PEAKS`, matched on torch.cuda.get_device_name; named in the output);
(3) bal: BAL-BERT-base end to end against Naive-BERT-base on one simulated log (wpultr.simulate, the
    `production` world of bench/worlds.py, 12 000 sessions of 10 results, inputs of ~33 tokens), each fitted as
    `wpultr run` fits it (`get_method(...).fit`, `precision` auto = bf16 on such a device) with pipelines/bal.yaml's
    discovery and bal sections and its ranker head, on a Dask LocalCluster when Dask is installed (as `wpultr run`;
    serial discovery without it, said so), epochs timed from their history (the last of 2; validation excluded from
    both); BAL's by step. BAL's epoch re-scores every row (a forward pass, about a third of a training pass) and runs
    its graph, weights and click model besides the ranker step, so the ratio grows with the log: the graph's cost is
    fixed (`discovery.n_sessions` rows).

Targets, printed beside the figures: bf16 >= 3x fp32 sessions/s, >= 35 % of the bf16 peak, BAL >= 0.8x Naive's
sessions/s (the carried H100 figures, docs/benchmarks.md: 63 sessions/s bare fp32 loop, 99 sessions/s BAL). The
whole script runs under its own time limit (`--timeout`, default 330 s: <= 6 minutes with start-up); the results go
to `--out` as JSON after every part, so a cut run keeps what it measured. `--smoke`: tiny sizes on the CPU, seconds
(tests/test_bench_gpu.py), its figures not a measurement.

    PYTHONUNBUFFERED=1 PYTHONPATH=. python bench/gpu.py --out gpu.json              # on the GPU machine
    PYTHONUNBUFFERED=1 PYTHONPATH=. python bench/gpu.py --smoke --out /tmp/gpu.json  # anywhere, tiny sizes, CPU
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import wpultr  # noqa: F401  first, as in `wpultr run`: its OpenMP wait policy is read when torch loads

# isort: split
import torch

import bert_throughput as bt  # bench/bert_throughput.py (the script's folder is on the path): sessions and config
from wpultr.config import config_from_dict
from wpultr.methods.naive import Naive
from wpultr.methods.training.trainer import Trainer, build_ranker

# Published dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, by a substring of torch.cuda.get_device_name
# (first match wins: the more specific names first).
PEAKS: list[tuple[str, str, float]] = [
    ("H200", "NVIDIA H200 SXM", 989.4),
    ("H100 PCIe", "NVIDIA H100 PCIe", 756.5),
    ("H100 NVL", "NVIDIA H100 NVL", 835.5),
    ("H100", "NVIDIA H100 SXM", 989.4),
    ("GH200", "NVIDIA GH200", 989.4),
    ("A100", "NVIDIA A100", 312.0),
    ("L40S", "NVIDIA L40S", 362.05),
    ("A10G", "NVIDIA A10G", 70.0),
    ("L4", "NVIDIA L4", 121.0),
]
TARGETS = {"bf16_over_fp32": 3.0, "mfu_bf16": 0.35, "bal_over_naive": 0.8}
# docs/benchmarks.md, one H100 (2026-11-27), fp32: the BERT-base training step, and BAL-BERT-base end to end on the
# bundled sample (real Baidu inputs, up to 128 tokens; the simulated log's are ~33)
CARRIED = {"fp32_sessions_per_s": 63.3, "bal_sessions_per_s": 99.0}
SIZES = {   # the full run and the smoke run
    "full": {"config": "base", "sessions": 1024, "batch": 64, "repeats": 2, "bal_sessions": 12000, "bal_queries": 300,
             "bal_epochs": 2},
    "smoke": {"config": "tiny", "sessions": 32, "batch": 8, "repeats": 1, "bal_sessions": 100, "bal_queries": 12,
              "bal_epochs": 1},
}


class Timeout(BaseException):
    """The script's own time limit passed (`--timeout`). A BaseException, as KeyboardInterrupt is, so that no
    `except Exception` on the way (a library's, a part's own) swallows it and the part runs on past the limit."""


def peak_for(device: torch.device) -> tuple[str | None, float | None]:
    """(the peak's name, dense bf16 TFLOP/s) of `device`, or (None, None) when the table does not know it."""
    if device.type != "cuda":
        return None, None
    name = torch.cuda.get_device_name(device)
    for key, label, tflops in PEAKS:
        if key in name:
            return label, tflops
    return None, None


def say(text: str) -> None:
    print(text, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def write_results(path: Path, results: dict[str, Any]) -> None:
    """The results so far, written whole (a temporary file renamed over `path`)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
def ranker_figures(sizes: dict[str, Any], device: torch.device, precisions: list[str], max_length: int | None
                   ) -> dict[str, Any]:
    """Sessions/s, tokens/s and model FLOP/s of wpultr's training step for each precision (part 1 and 2)."""
    frame = bt.sessions_table(sizes["sessions"] * bt.RESULTS, bt.CONFIGS[sizes["config"]]["vocab"],
                              lengths=bt.CONFIGS[sizes["config"]]["lengths"])
    sessions = len(frame) // bt.RESULTS
    out: dict[str, Any] = {"sessions_per_epoch": sessions, "batch_sessions": sizes["batch"], "precisions": {}}
    for name in precisions:
        tf32 = name == "fp32+tf32"
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        cfg = bt.run_config(sizes["config"], device.type, sizes["batch"], max_length)
        cfg.train.precision = "fp32" if tf32 else name
        trainer = Trainer(build_ranker(cfg, frame), frame, None, cfg)
        ranker = trainer.ranker
        modules = ranker.score_modules()
        params = sum(p.numel() for m in modules.values() for p in m.parameters())
        tokens = [0]

        def count(module, args, kwargs, tokens=tokens):   # the encoder's input ids of a batch (up to its longest)
            tokens[0] += (kwargs["input_ids"] if "input_ids" in kwargs else args[0]).numel()
        hook = ranker.encoder.bert.embeddings.register_forward_pre_hook(count, with_kwargs=True)
        warm = Trainer(ranker, frame.iloc[: 2 * sizes["batch"] * bt.RESULTS], None, cfg)
        Naive().fit_trainer(warm, cfg)                    # untimed: kernels, autotuning, the allocator's pools
        del warm
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        walls, counted = [], []
        for _ in range(sizes["repeats"]):
            tokens[0] = 0
            sync(device)
            start = time.perf_counter()
            Naive().fit_trainer(trainer, cfg)
            sync(device)
            walls.append(time.perf_counter() - start)
            counted.append(tokens[0])
        hook.remove()
        wall = statistics.median(walls)
        token_rate = statistics.median(counted) / wall
        entry = {"precision": trainer.precision + ("+tf32" if tf32 else ""), "parameters": params,
                 "seconds": [round(w, 3) for w in walls], "sessions_per_s": sessions / wall,
                 "tokens_per_s": token_rate, "tokens_per_session": statistics.median(counted) / sessions,
                 "model_tflops": 6 * params * token_rate / 1e12,
                 "max_memory_gib": (torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda"
                                    else None)}
        out["precisions"][name] = entry
        say(f"  {name:>9}: {entry['sessions_per_s']:8.1f} sessions/s  {token_rate:10.0f} tokens/s "
            f"({entry['tokens_per_session']:.0f} a session)  {entry['model_tflops']:7.1f} model TFLOP/s  "
            f"epochs {', '.join(f'{w:.2f}' for w in walls)} s"
            + (f"  peak memory {entry['max_memory_gib']:.1f} GiB" if entry["max_memory_gib"] is not None else ""))
        del trainer, ranker, modules
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    torch.set_float32_matmul_precision("highest")
    return out


# ---------------------------------------------------------------------------------------------
BAL_YAML = Path(__file__).resolve().parents[1] / "pipelines" / "bal.yaml"


def bal_figures(sizes: dict[str, Any], device: torch.device, smoke: bool, max_length: int) -> dict[str, Any]:
    """BAL-BERT-base against Naive-BERT-base on one simulated log, end to end (part 3)."""
    from worlds import WORLDS  # bench/worlds.py
    from wpultr.config import read_yaml_mapping
    shipped = read_yaml_mapping(BAL_YAML)
    bert = dict(bt.BASE) if not smoke else {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                            "intermediate_size": 64}
    values = {
        "seed": 0, "cluster": {"memory_limit": "auto"},   # no Dask here: a size would be parsed by it
        "data": {"source": "simulate", "valid_fraction": 0.2,
                 "simulate": {**WORLDS["production"], "n_queries": sizes["bal_queries"],
                              "n_sessions": sizes["bal_sessions"],
                              "n_annotated_queries": max(8, sizes["bal_queries"] // 4),
                              "vocab_size": 30000 if not smoke else 500}},
        "ranker": {"backbone": "bert", "head": shipped["ranker"]["head"] if not smoke else [8],
                   "bert": {**bert, "max_length": max_length}},
        "train": {"epochs": sizes["bal_epochs"], "warmup_epochs": 0, "batch_size": sizes["batch"],
                  "device": device.type},
        "discovery": {**shipped["discovery"], **({"n_sessions": 100, "n_bootstrap": 0} if smoke else {})},
        "bal": {**shipped["bal"], **({"estimator_rows": 500, "influence": {"epochs": 3}} if smoke else {})},
    }
    try:
        import distributed  # noqa: F401

        from wpultr.cluster import open_client
        cluster = open_client(config_from_dict(values).cluster) if not smoke else None
    except ImportError:
        cluster = None
    say(f"  discovery's CI tests: {'on a Dask LocalCluster' if cluster else 'serially in this process'}")
    if cluster is None:
        return bal_fits(values, sizes, device)
    with cluster:
        return bal_fits(values, sizes, device)


def bal_fits(values: dict[str, Any], sizes: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Naive and BAL fitted on the simulated log of `values` (part 3), each timed."""
    from wpultr.settings.methods import get_method
    from wpultr.simulate import simulate
    logs = simulate(config_from_dict(values).data.simulate, seed=0)
    sessions = int(logs.sessions["session_id"].nunique())
    say(f"  simulated log: {sessions} sessions, {len(logs.sessions)} shown results (bench/worlds.py's production)")
    out: dict[str, Any] = {"sessions": sessions, "methods": {}}
    for label, method in (("Naive", "naive"), ("BAL", "bal")):
        cfg = config_from_dict({**values, "train": {**values["train"], "method": method}})
        sync(device)
        start = time.perf_counter()
        result = get_method(method).fit(logs.sessions, logs.annotations, cfg)
        sync(device)
        wall = time.perf_counter() - start
        epochs = [e for e in result.history if e.get("phase") != "warmup"]
        last = epochs[-1]
        entry = {"precision": last.get("precision"), "fit_seconds": wall,
                 "epoch_seconds": [e["seconds"] for e in epochs],
                 "sessions_per_s": sessions / last["seconds"], "fit_sessions_per_s": sessions * len(epochs) / wall,
                 "steps": last.get("step_seconds"), "valid_dcg10": (last.get("valid") or {}).get("DCG@10")}
        out["methods"][label] = entry
        steps = entry["steps"]
        say(f"  {label:>5} ({entry['precision']}): last epoch {last['seconds']:.2f} s = {entry['sessions_per_s']:.1f} "
            f"sessions/s; fit {wall:.1f} s for {len(epochs)} epochs"
            + (f"; steps {', '.join(f'{k} {v:.2f} s' for k, v in steps.items())}" if steps else ""))
        del result
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    out["bal_over_naive"] = out["methods"]["BAL"]["sessions_per_s"] / out["methods"]["Naive"]["sessions_per_s"]
    return out


# ---------------------------------------------------------------------------------------------
def verdict(value: float | None, target: float, fmt: str) -> str:
    if value is None:
        return "n/a"
    return f"{fmt.format(value)} (target >= {fmt.format(target)}: {'met' if value >= target else 'NOT met'})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="JSON file the results are written to")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (seconds): checks the script runs")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda, cpu with --smoke")
    parser.add_argument("--batch", type=int, default=None, help="sessions a batch (full: 64 = 640 inputs)")
    parser.add_argument("--sessions", type=int, default=None, help="sessions a timed ranker epoch (full: 1024)")
    parser.add_argument("--bal-sessions", type=int, default=None, help="sessions of the simulated log (full: 12 000)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens an input (full: 128)")
    parser.add_argument("--precisions", default=None,
                        help="comma-separated: fp32, bf16, fp16, fp32+tf32 (default: fp32,bf16,fp32+tf32 on CUDA)")
    parser.add_argument("--parts", default="ranker,bal", help="comma-separated: ranker (1 and 2), bal (3)")
    parser.add_argument("--timeout", type=float, default=330.0, help="the script's own limit in seconds")
    args = parser.parse_args(argv)

    sizes = dict(SIZES["smoke" if args.smoke else "full"])
    for key, value in (("batch", args.batch), ("sessions", args.sessions), ("bal_sessions", args.bal_sessions)):
        if value is not None:
            sizes[key] = value
    device = torch.device(args.device or ("cpu" if args.smoke else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        say("error: --device cuda: no CUDA device here (torch.cuda.is_available() is False); use --smoke on a CPU")
        return 2
    small = device.type == "cuda" and torch.cuda.get_device_properties(device).total_memory < 100 << 30
    if args.batch is None and small:
        sizes["batch"] //= 2             # fp32 BERT-base at 640 inputs of 128 tokens wants ~70 GB of activations
    precisions = (args.precisions.split(",") if args.precisions
                  else ["fp32", "bf16", "fp32+tf32"] if device.type == "cuda" else ["fp32", "bf16"])
    max_length = args.max_length or (128 if not args.smoke else 32)
    parts = args.parts.split(",")
    peak_name, peak = peak_for(device)

    started = time.perf_counter()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    import transformers
    results: dict[str, Any] = {
        "smoke": args.smoke, "device": device.type, "device_name": name, "peak": peak_name,
        "peak_bf16_tflops": peak, "torch": torch.__version__, "transformers": transformers.__version__,
        "cuda": torch.version.cuda, "cpus": os.cpu_count(), "sizes": sizes, "max_length": max_length,
        "targets": TARGETS, "carried": CARRIED, "timed_out": False}
    say(f"gpu bench{' (smoke: tiny sizes, not a measurement)' if args.smoke else ''}: device {device.type} ({name}); "
        f"dense bf16 peak {f'{peak} TFLOP/s ({peak_name})' if peak else 'unknown for this device'}; torch "
        f"{torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
        f"{os.cpu_count()} cpus; limit {args.timeout:.0f} s")
    write_results(args.out, results)

    def expired(signum, frame):
        raise Timeout()
    signal.signal(signal.SIGALRM, expired)    # the limit counts from here: the imports and header take seconds
    failed = []
    try:    # the timer is set inside the try, so a limit that passes at once is still caught as one
        signal.setitimer(signal.ITIMER_REAL, max(args.timeout - (time.perf_counter() - started), 0.001))
        if "ranker" in parts:
            say(f"(1) ranker: {'BERT-base' if sizes['config'] == 'base' else 'tiny BERT'} trained by wpultr's step, "
                f"{sizes['sessions']} sessions an epoch, batch {sizes['batch']} sessions, max_length {max_length}, "
                f"median of {sizes['repeats']} epochs after an untimed warm-up")
            if not guarded("ranker", results, lambda: ranker_part(results, sizes, device, precisions, max_length)):
                failed.append("ranker")
            write_results(args.out, results)
        if "bal" in parts:
            say(f"(3) BAL against Naive, BERT-{'base' if not args.smoke else 'tiny'}, end to end on a simulated log "
                f"({sizes['bal_epochs']} epochs each, precision auto)")
            if not guarded("bal", results, lambda: bal_part(results, sizes, device, args.smoke, max_length)):
                failed.append("bal")
            write_results(args.out, results)
    except Timeout:
        results["timed_out"] = True
        say(f"timed out after {time.perf_counter() - started:.0f} s (--timeout {args.timeout:.0f}): the parts "
            f"finished are in {args.out}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        results["seconds"] = round(time.perf_counter() - started, 1)
        write_results(args.out, results)
    say(f"done in {results['seconds']} s; results in {args.out}")
    return 124 if results["timed_out"] else 1 if failed else 0


def guarded(part: str, results: dict[str, Any], run) -> bool:
    """Run one part; an error (out of GPU memory included) is printed with its traceback and recorded under
    `results[part]`, and the other parts still run. False when it failed."""
    try:
        run()
        return True
    except Timeout:
        raise
    except Exception as error:            # a bench reports every part it can
        traceback.print_exc()
        hint = "; try a smaller --batch" if isinstance(error, torch.cuda.OutOfMemoryError) else ""
        say(f"    part {part} failed: {type(error).__name__}: {str(error)[:300]}{hint}")
        results[part] = {"error": f"{type(error).__name__}: {str(error)[:1000]}"}
        return False


def ranker_part(results: dict[str, Any], sizes: dict[str, Any], device: torch.device, precisions: list[str],
                max_length: int) -> None:
    """Parts 1 and 2: sessions/s by precision, bf16 / fp32, and the model FLOP utilisation of the bf16 peak."""
    peak_name, peak = results["peak"], results["peak_bf16_tflops"]
    figures = ranker_figures(sizes, device, precisions, max_length)
    say(f"    carried (docs/benchmarks.md, H100, fp32, batch 32 sessions): {CARRIED['fp32_sessions_per_s']} sessions/s")
    results["ranker"] = figures
    got = figures["precisions"]
    speedup = (got["bf16"]["sessions_per_s"] / got["fp32"]["sessions_per_s"]
               if "bf16" in got and "fp32" in got else None)
    mfu = {k: v["model_tflops"] / peak for k, v in got.items()} if peak else None
    results["bf16_over_fp32"], results["mfu"] = speedup, mfu
    say(f"(2) bf16 / fp32 sessions/s: {verdict(speedup, TARGETS['bf16_over_fp32'], '{:.2f}x')}")
    if mfu:
        say("    model FLOP utilisation (6 x params x tokens/s) of the dense bf16 peak "
            f"({peak} TFLOP/s, {peak_name}): " + ", ".join(f"{k} {v:.1%}" for k, v in mfu.items())
            + f"; bf16 {verdict(mfu.get('bf16'), TARGETS['mfu_bf16'], '{:.0%}')}")
    else:
        say(f"    model FLOP utilisation: no published bf16 peak for {results['device_name']} in PEAKS: "
            + ", ".join(f"{k} {v['model_tflops']:.2f} model TFLOP/s" for k, v in got.items()))


def bal_part(results: dict[str, Any], sizes: dict[str, Any], device: torch.device, smoke: bool,
             max_length: int) -> None:
    """Part 3: BAL against Naive end to end."""
    figures = bal_figures(sizes, device, smoke, max_length)
    results["bal"] = figures
    say(f"    carried (docs/benchmarks.md, H100, fp32, the bundled sample's longer inputs): BAL-BERT-base "
        f"{CARRIED['bal_sessions_per_s']} sessions/s")
    say(f"    BAL / Naive sessions/s (last epochs): "
        f"{verdict(figures['bal_over_naive'], TARGETS['bal_over_naive'], '{:.2f}x')}")


if __name__ == "__main__":
    sys.exit(main())
