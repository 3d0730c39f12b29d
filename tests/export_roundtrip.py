"""The smallest finished run of every export case (a ranker kind and the inputs it reads), built once per test
session on first use: test_export_round_trip scores each through its export, test_export tampers with some."""
from pathlib import Path

import torch

from wpultr.config import config_from_dict
from wpultr.pipeline.runner import run_pipeline
from wpultr.rundir import layout as L
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = {"n_queries": 20, "docs_per_query": 8, "n_sessions": 200, "n_annotated_queries": 12,
       "results_per_page": 6, "vocab_size": 150, "n_dense_features": 4}
# one score per doc_id: a closed one-hot corpus, every document seen in the logs
EMBEDDING_SIM = {"corpus": "onehot", "n_documents": 60, "n_queries": 20, "docs_per_query": 6, "results_per_page": 6,
                 "n_sessions": 300, "n_annotated_queries": 12, "zipf_exponent": 0.0, "n_dense_features": 1,
                 "user_model": "pbm", "logging_media_boost": [0.0, 0.0, 0.0, 0.0]}
SIMULATED = {"source": "simulate", "simulate": SIM}

# case -> (ranker kind, the run config's sections beyond the common ones); the smallest run that exercises the path
CASES: dict[str, tuple[str, dict]] = {
    "mlp": ("mlp", {"data": "baidu", "ranker": {"backbone": "mlp"}}),     # the demo's path: lexical state travels
    "mlp-dense": ("mlp", {"data": SIMULATED, "ranker": {"backbone": "mlp"}}),     # BAL's, LBD's, the oracle's path
    "bert": ("bert", {"data": "baidu", "ranker": {"backbone": "bert", "bert": {"max_length": 24}}}),
    "lightgbm": ("lightgbm", {     # the lambdarank anchor, boosted by lightgbm.dask over three partitions
        "data": {**SIMULATED, "partition_rows": 400}, "train": {"method": "lightgbm_lambdarank"},
        "ranker": {"lightgbm": {"rounds": 5, "min_data_in_leaf": 2, "distributed": True}}}),
    "lightgbm-custom-objective": ("lightgbm", {     # the backbone's booster (BAL, naive, PRS, the pairwise methods)
        "data": SIMULATED, "train": {"epochs": 2, "warmup_epochs": 1},
        "ranker": {"backbone": "lightgbm",
                   "lightgbm": {"rounds_per_epoch": 3, "min_data_in_leaf": 2, "num_threads": 1}}}),
    "xgboost": ("xgboost", {"data": SIMULATED, "train": {"method": "xgboost_unbiased"},
                            "xgboost": {"rounds": 10, "eval_every": 5, "early_stopping": "none", "num_threads": 1}}),
    "embedding": ("embedding", {
        "data": {"source": "simulate", "simulate": EMBEDDING_SIM, "page_features": {"position": "ordinal"}},
        "ranker": {"backbone": "embedding"}, "train": {"learning_rate": 0.05, "device": "cpu"}}),
}


class CaseRuns:
    """The finished run of each export case, run on the test session's cluster when first asked for."""

    def __init__(self, tmp: Path, client) -> None:
        self.tmp, self.client, self._runs, self._baidu = tmp, client, {}, None

    def baidu_logs(self) -> Path:
        """Simulated token-only logs in the Baidu-ULTR layout (gzip session files + annotation TSV)."""
        if self._baidu is None:
            self._baidu = self.tmp / "baidu"
            simulate(SimulateConfig(**SIM), seed=4).write(self._baidu, fmt="baidu")
        return self._baidu

    def __getitem__(self, case: str) -> Path:
        if case not in self._runs:
            _, sections = CASES[case]
            data = sections["data"]
            if data == "baidu":
                logs = self.baidu_logs()
                data = {"source": "baidu", "train": [str(logs / "train" / "*.gz")],
                        "annotations": str(logs / "annotations.tsv.gz")}
            cfg = {"name": case, "seed": 1, "run_dir": str(self.tmp / "{name}"),
                   "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}, **sections,
                   "data": {"valid_fraction": 0.3, **data},
                   "ranker": {"head": [16], **sections.get("ranker", {})},
                   "train": {"epochs": 1, "batch_size": 32, **sections.get("train", {})}}
            threads = torch.get_num_threads()
            torch.set_num_threads(1)           # small torch fits run faster (and steadier) on one thread
            try:
                self._runs[case] = run_pipeline(config_from_dict(cfg), client=self.client).run_dir
            finally:
                torch.set_num_threads(threads)
        return self._runs[case]

    def input_file(self, case: str) -> Path:
        """What a user scores: the Baidu annotation file for token runs, the run's annotation table otherwise."""
        return self.baidu_logs() / "annotations.tsv.gz" if CASES[case][1]["data"] == "baidu" \
            else self[case] / L.ANNOTATIONS

