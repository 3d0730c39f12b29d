"""The document-id ranker (`ranker.backbone: embedding`): one learned score per document id, nothing else.

What the Identifiability paper's fully synthetic study calls an embedding model (§5.1, Appendix C.3: a free
relevance parameter per one-hot document), and what a production owner keeps for head queries, whose documents
have clicks enough to be scored on their own. The score reads no features (no MLP): a document the ranker did
not train on cannot borrow from similar ones, so it gets the mean of the learned scores — a neutral middle — and
every such row is counted and logged when a table is prepared.

Ids are `doc_id` text (schema: Arrow string; Baidu's ids are numbers written as text, compared as text). The id
of each row of the score table is kept beside the weights in `vocabulary.json` (a JSON list of strings, no
pickle), whose sha256 and length config.json records, so a vocabulary edited, reordered or swapped for another
run's is an ExportError when the ranker loads.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..errors import ExportError
from ..schema import DOC_ID, SchemaError
from .base import Arg, Inputs, Ranker, read_json_bounded

VOCABULARY_FILE = "vocabulary.json"
DOC_INDEX = "doc_index"            # prepared input: each row's index in the vocabulary, -1 when unseen
MAX_DOCUMENTS = 50_000_000         # rows of the score table a saved config may ask for
MAX_VOCABULARY_BYTES = 4 << 30
INIT_STD = 0.01                    # the scores start near 0 (all documents alike), seeded by build_ranker
log = logging.getLogger(__name__)


def _vocabulary_bytes(vocabulary: list[str]) -> bytes:
    return json.dumps(vocabulary, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def doc_id_text(frame: pd.DataFrame, table: str = "table") -> pd.Series:
    """The `doc_id` column as text (null stays null); SchemaError when the table has none."""
    if DOC_ID not in frame.columns:
        raise SchemaError(f"{table}: the embedding ranker scores documents by {DOC_ID!r}, a column this table "
                          f"lacks; present: {list(frame.columns)}")
    ids = frame[DOC_ID]
    return ids.where(ids.isna(), ids.astype(str))


class EmbeddingRanker(Ranker):
    """score = s[index of doc_id]; an unseen id scores the mean of s."""

    kind = "embedding"
    ARGS = {"n_documents": Arg("int", 1, MAX_DOCUMENTS), "vocabulary_sha256": Arg("str")}

    def __init__(self, n_documents: int, vocabulary_sha256: str = ""):
        super().__init__()
        self.n_documents, self.vocabulary_sha256 = int(n_documents), str(vocabulary_sha256)
        self.document_scores = torch.nn.Parameter(torch.randn(self.n_documents) * INIT_STD)
        self.vocabulary: list[str] = []
        self._index: pd.Index | None = None

    @classmethod
    def for_table(cls, frame: pd.DataFrame) -> EmbeddingRanker:
        """A ranker with one score for each distinct `doc_id` of `frame` (sorted as text)."""
        ids = doc_id_text(frame, "sessions").dropna().unique()
        if not len(ids):
            raise SchemaError(f"sessions: column {DOC_ID!r} holds no document id; the embedding ranker needs them")
        vocabulary = sorted(ids.tolist())
        ranker = cls(len(vocabulary), _sha256(_vocabulary_bytes(vocabulary)))
        ranker._set_vocabulary(vocabulary)
        return ranker

    def _set_vocabulary(self, vocabulary: list[str]) -> None:
        self.vocabulary = vocabulary
        self._index = pd.Index(vocabulary)

    def init_args(self) -> dict[str, Any]:
        return {"n_documents": self.n_documents, "vocabulary_sha256": self.vocabulary_sha256}

    def save(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """config.json and model.safetensors (Ranker.save), and the ids in vocabulary.json."""
        directory = super().save(directory, extra)
        (directory / VOCABULARY_FILE).write_bytes(_vocabulary_bytes(self.vocabulary))
        return directory

    def load_files(self, directory: Path) -> None:
        """Read vocabulary.json beside the weights: a list of as many distinct strings as scores, whose sha256 is
        the one config.json records; ExportError otherwise (registry.load_ranker calls this)."""
        path = Path(directory) / VOCABULARY_FILE
        vocabulary = read_json_bounded(path, MAX_VOCABULARY_BYTES, "expected the embedding ranker's document ids")
        if _sha256(_vocabulary_bytes(vocabulary) if isinstance(vocabulary, list) else b"") != self.vocabulary_sha256:
            raise ExportError(f"{path}: its sha256 is not the vocabulary_sha256 config.json records: the document "
                              f"ids were edited or come from another ranker")
        ok = all(isinstance(v, str) for v in vocabulary) and len(set(vocabulary)) == len(vocabulary)
        if not ok or len(vocabulary) != self.n_documents:
            raise ExportError(f"{path}: expected {self.n_documents} distinct document id strings, found "
                              f"{len(vocabulary)} entries")
        self._set_vocabulary(vocabulary)

    def prepare(self, frame: pd.DataFrame) -> Inputs:
        """Each row's vocabulary index (-1: an id not trained on, or none); the unseen rows are counted in a log
        warning, since they all get the same (mean) score."""
        if self._index is None:
            raise ExportError("embedding ranker: no vocabulary loaded (load it with rankers.registry.load_ranker)")
        index = self._index.get_indexer(doc_id_text(frame)).astype(np.int64)
        unseen = int((index < 0).sum())
        if unseen:
            log.warning("%d of %d rows have a %s the embedding ranker did not train on; they score the mean "
                        "document score", unseen, len(index), DOC_ID)
        return {DOC_INDEX: torch.from_numpy(index)}

    def forward(self, inputs: Inputs) -> torch.Tensor:
        index = inputs[DOC_INDEX]
        scores = self.document_scores[index.clamp(min=0)]
        unseen = index < 0
        if bool(unseen.any()):
            scores = torch.where(unseen, self.document_scores.mean(), scores)
        return scores
