"""Where each file lives inside a run directory: the one place these paths are spelled.

Everything that reads or writes a run directory (the stages, the runner, the report, export, the
CLI, the experiment harness) takes the names from here, so no module needs another's code for them.
"""
from __future__ import annotations

MARKER = ".wpultr-run"                   # in every run directory: what --fresh may delete
RUN_LOCK = ".{run}.wpultr-lock"          # beside run directory {run} while a run holds it (pipeline/run_lock.py)
CONFIG_FILE = "config.yaml"              # the config as resolved (defaults filled in)
VERSIONS_FILE = "versions.json"          # Python, platform and package versions
SUMMARY_FILE = "summary.json"            # every stage: seconds, finish time, what it reported
STAGES_DIR = "stages"                    # completion records, one per stage
# the pipeline's stages in run order (pipeline/stages.STAGES, checked by tests/test_startup.py): named here
# so that `wpultr status` lists stages/<name>.json without importing the stages (pandas, Dask, the config)
STAGE_NAMES = ("ingest", "featurize", "preprocess", "split", "train", "discover", "evaluate", "report")

SESSIONS_DIR = "data/sessions"
ANNOTATIONS_FILE = "annotations.parquet"  # beside the sessions of a simulated or converted log (ingest's input)
ANNOTATIONS = f"data/{ANNOTATIONS_FILE}"
INGEST_SUMMARY = "data/ingest.json"
INGEST_MARKER = ".wpultr-ingest.json"     # in every sessions table ingest writes: its inputs, complete or not
TRUTH_DIR = "data/truth"
TRUTH_JSON = "truth.json"                  # in TRUTH_DIR (and a simulator's out_dir): the true graph and settings
TRUTH_SESSIONS = "truth_sessions.parquet"  # in TRUTH_DIR: every shown result's true relevance, examination,
#                                            click chance
FEATURED_SESSIONS_DIR = "data/featured/sessions"
FEATURED_ANNOTATIONS = "data/featured/annotations.parquet"
LEXICAL_STATE = "data/featured/lexical.json"
SPLIT = "data/split.json"
HELDOUT_SESSIONS_DIR = "data/heldout_sessions"   # sessions held out of training (evaluation.heldout_sessions)
HELDOUT_INGEST_DIR = "data/heldout"              # data.heldout's files as ingested: sessions/ and quarantine/
HELDOUT_INGESTED = f"{HELDOUT_INGEST_DIR}/sessions"   # ... the sessions the evaluate stage scores label-free
PAGE_ENCODER = "data/page_encoder"
SESSION_SCORES = "data/session_scores.parquet"
RANKER_DIR = "ranker"
HISTORY = "train/history.json"
BIAS = "train/bias.json"
RANK_LOGS = "train/ranks"                 # each DDP rank's log, rank<k>.log (train.processes > 1)
TRAIN_CHECKPOINT = "train/checkpoint.pt"  # the last finished epoch while the train stage runs (training/checkpoint.py)
IDENTIFIABILITY = "train/identifiability.json"          # the train stage's identifiability pre-flight
IDENTIFIABILITY_FIGURE = "train/identifiability.png"   # its identifiability graph, drawn
EPOCH_PREFIX = "epoch_"                  # epoch_<k>/: what discovery found at BAL's epoch k
GRAPH_FILE = "graph.json"                # in epoch_<k>/: the graph (written last: its presence means the epoch is done)
BIASES_FILE = "biases.json"              # in epoch_<k>/: the biases read off the graph
SAMPLE_FILE = "sample.parquet"           # in epoch_<k>/: the sampled rows PC saw, before encoding
METRICS = "metrics.json"
PER_QUERY = "eval/per_query.parquet"
TEST_SCORES = "eval/scores.parquet"
REPORT = "report.html"
CLUSTER_LOG = "logs/cluster.log"         # Dask's own messages during a run (kept out of the terminal)
