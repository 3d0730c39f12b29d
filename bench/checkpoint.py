"""What the train stage's per-epoch checkpoint costs (issue 43: resume from the last finished epoch).

1. The MLP on a simulated log (bench/worlds.py's `production` world, `--sessions` sessions, the demo's ranker and
   batch size), naive for `--epochs` epochs in one process with the checkpoint on: each epoch's seconds (as the
   history records them) against the seconds of its checkpoint (`Checkpoint.save` of `Trainer.checkpoint_state`,
   timed around the call), and the file's size.
2. With `--bert-base`: a BERT-base-sized ranker (768 wide, 12 layers; random weights, nothing downloaded) after one
   Adam step: the seconds and size of one checkpoint — an epoch of it costs hours on a CPU and ~3 h per million
   sessions on an H100 in fp32 (docs/benchmarks.md), so only the save is timed.

    PYTHONPATH=. python bench/checkpoint.py                    # MLP, 20 000 sessions, 3 epochs
    PYTHONPATH=. python bench/checkpoint.py --bert-base        # and the BERT-base save (about 1.3 GB written)
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

import wpultr  # noqa: F401,I001  first, as in `wpultr run`: its OpenMP wait policy is read when torch loads
from worlds import WORLDS  # bench/worlds.py (the script's folder is on the path)
from wpultr.config import config_from_dict, read_yaml_mapping
from wpultr.methods.training.checkpoint import Checkpoint, config_key, keep_checkpoints
from wpultr.rundir.files import RunDir
from wpultr.settings.methods import get_method
from wpultr.simulate import simulate

DEMO = Path(__file__).resolve().parents[1] / "pipelines" / "demo.yaml"
BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}


def timed_saves() -> list[float]:
    """Wrap Checkpoint.save so each call's seconds are appended to the returned list."""
    seconds: list[float] = []
    original = Checkpoint.save

    def save(self, payload):
        start = time.perf_counter()
        original(self, payload)
        seconds.append(time.perf_counter() - start)
    Checkpoint.save = save
    return seconds


def config(args: argparse.Namespace, backbone: str):
    demo = read_yaml_mapping(DEMO)
    ranker = {**demo["ranker"], "backbone": backbone}
    if backbone == "bert":
        ranker["bert"] = {**(ranker.get("bert") or {}), **BASE}
    return config_from_dict({"seed": 0, "ranker": ranker,
                             "train": {**demo["train"], "method": "naive", "epochs": args.epochs, "warmup_epochs": 0,
                                       "device": "cpu", "processes": 1, "streaming": False},
                             "data": {"simulate": {**WORLDS["production"], "n_sessions": args.sessions}}})


def mlp(args: argparse.Namespace, root: Path) -> None:
    cfg = config(args, "mlp")
    logs = simulate(cfg.data.simulate, seed=0)
    path = RunDir.create(root / "mlp").path("train/checkpoint.pt")
    saves = timed_saves()
    with keep_checkpoints(path, config_key(cfg)):
        result = get_method("naive").fit(logs.sessions, logs.annotations, cfg)
    epochs = [e["seconds"] for e in result.history]
    print(f"MLP (head {cfg.ranker.head}), {args.sessions} sessions, batch {cfg.train.batch_size}, "
          f"{torch.get_num_threads()} torch threads")
    print(f"{'epoch':>5} {'epoch s':>9} {'checkpoint s':>13} {'share':>7}")
    for k, (e, c) in enumerate(zip(epochs, saves, strict=True)):
        print(f"{k:>5} {e:>9.3f} {c:>13.4f} {c / e:>7.2%}")
    print(f"checkpoint file: {path.stat().st_size / 1e6:.2f} MB")


def bert_base(args: argparse.Namespace, root: Path) -> None:
    from wpultr.methods.training.trainer import Trainer, build_ranker
    cfg = config(args, "bert")
    cfg.data.simulate.n_sessions = 200
    logs = simulate(cfg.data.simulate, seed=0)
    path = RunDir.create(root / "bert").path("train/checkpoint.pt")
    with keep_checkpoints(path, config_key(cfg)):
        trainer = Trainer(build_ranker(cfg, logs.sessions), logs.sessions, None, cfg)
        params = sum(p.numel() for p in trainer.ranker.parameters())
        for p in trainer.ranker.parameters():       # Adam's moments as after a step
            p.grad = torch.zeros_like(p)
        trainer.optimizer.step()
        trainer.history.append({"epoch": 0})
        start = time.perf_counter()
        trainer.checkpoint.save(trainer.checkpoint_state())
        seconds = time.perf_counter() - start
    size = path.stat().st_size
    print(f"BERT-base sizes ({params / 1e6:.1f} M parameters): one checkpoint {size / 1e9:.2f} GB in {seconds:.2f} s "
          f"({size / 1e6 / seconds:.0f} MB/s)")
    path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--bert-base", action="store_true", help="also time one BERT-base-sized checkpoint")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="wpultr-bench-checkpoint-") as tmp:
        mlp(args, Path(tmp))
        if args.bert_base:
            bert_base(args, Path(tmp))


if __name__ == "__main__":
    main()
