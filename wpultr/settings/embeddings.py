"""Settings of the Baidu-ULTR embedding datasets' reader (run config key `data.embeddings`; data.source
baidu_embeddings): the embedding's width and the LTR features appended to it as dense features."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import require
from ..schema import EMBEDDING_LTR_FEATURES, EMBEDDING_WIDTH
from .checks import int_at_least


@dataclass
class EmbeddingsConfig:
    KEY: ClassVar[str] = "data.embeddings"

    width: int = EMBEDDING_WIDTH             # values per query_document_embedding row (768 as published)
    ltr_features: list[str] = field(default_factory=list)   # of schema.EMBEDDING_LTR_FEATURES, appended in this
    #                                          order after the embedding in `features` ([]: the embedding alone)
    batch_rows: int = 32_768                 # shown results converted at a time (float16 -> float32 per batch)

    def __post_init__(self) -> None:
        k = self.KEY
        require(int_at_least(self.width, 1), f"{k}.width", "an integer >= 1", self.width)
        require(isinstance(self.ltr_features, list) and all(f in EMBEDDING_LTR_FEATURES for f in self.ltr_features)
                and len(set(self.ltr_features)) == len(self.ltr_features), f"{k}.ltr_features",
                f"a list of distinct names from: {', '.join(EMBEDDING_LTR_FEATURES)}", self.ltr_features)
        require(int_at_least(self.batch_rows, 1), f"{k}.batch_rows", "an integer >= 1", self.batch_rows)
