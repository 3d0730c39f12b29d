"""Where the sessions come from (run config key `data`): the source, its files, page features and partitions."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..errors import ConfigError, SchemaError, require
from ..schema import BAIDU_PAGE_FEATURES, EMBEDDING_PAGE_FEATURES, PageFeature, page_features_from_config
from ..storage import check_url, is_url
from .checks import finite as _finite
from .checks import int_at_least as _int_at_least
from .embeddings import EmbeddingsConfig
from .simulate import SimulateConfig

SOURCES = ("simulate", "baidu", "baidu_embeddings", "parquet")   # data.source: where the sessions come from
_BAIDU_DEFAULT_PAGE_FEATURES = {f.name: f.kind.value for f in BAIDU_PAGE_FEATURES}


@dataclass
class DataConfig:
    KEY: ClassVar[str] = "data"

    source: Literal[SOURCES] = "simulate"
    train: list[str] = field(default_factory=list)        # files / globs of session logs
    annotations: str | None = None                       # annotation file (Baidu) or table
    heldout: list[str] = field(default_factory=list)      # baidu_embeddings: session files kept out of training,
    #                                                       scored label-free (metrics.json "clicks"; study: part 0)
    valid_fraction: float = 0.1                          # of annotated queries, held out for model selection
    page_features: dict[str, str] = field(
        default_factory=lambda: {f.name: f.kind.value for f in BAIDU_PAGE_FEATURES})
    max_sessions: int | None = None                      # read at most this many sessions (None: all)
    partition_rows: int = 200_000                        # rows per Parquet partition written by ingest
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)
    # source simulate: "unbiased" redraws every click with no bias (each shown result examined, clicked for its
    # relevance: simulate/unbiased.py), the unbiased-click ceiling an experiment sets beside the debiasers
    clicks: Literal["logged", "unbiased"] = "logged"

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.source in SOURCES, f"{k}.source", f"one of {', '.join(map(repr, SOURCES))}", self.source)
        require(all(isinstance(t, str) and t.strip() for t in self.train), f"{k}.train",
                "a list of non-empty file paths or globs", self.train)
        require(self.source == "simulate" or bool(self.train), f"{k}.train",
                f"at least one log path for source {self.source!r}", self.train)
        require(self.annotations is None or (isinstance(self.annotations, str) and self.annotations.strip() != ""),
                f"{k}.annotations", "null or a file path", self.annotations)
        if self.source == "baidu_embeddings" and self.page_features == _BAIDU_DEFAULT_PAGE_FEATURES:
            # the gzip logs' default names serp_max_show_height, which the embedding datasets do not carry
            self.page_features = {f.name: f.kind.value for f in EMBEDDING_PAGE_FEATURES}
        for source in ("baidu", "baidu_embeddings"):
            require(self.source != source or self.annotations is not None, f"{k}.annotations",
                    f"the annotation file for source {source!r}", self.annotations)
        require(all(isinstance(t, str) and t.strip() for t in self.heldout), f"{k}.heldout",
                "a list of non-empty file paths or globs", self.heldout)
        require(not self.heldout or self.source == "baidu_embeddings", f"{k}.heldout",
                "[] unless data.source is 'baidu_embeddings' (other sources hold sessions out with "
                "evaluation.heldout_sessions)", self.heldout)
        for key, path in ([(f"{k}.train", t) for t in self.train] + [(f"{k}.heldout", t) for t in self.heldout]
                          + [(f"{k}.annotations", self.annotations)]):
            if is_url(path):   # fsspec URL: a known protocol whose package is installed
                check_url(path, key)
        require(_finite(self.valid_fraction, 0.0, 1.0), f"{k}.valid_fraction", "in [0, 1)", self.valid_fraction)
        require(self.max_sessions is None or _int_at_least(self.max_sessions, 1), f"{k}.max_sessions",
                "null (every session) or an integer >= 1", self.max_sessions)
        require(_int_at_least(self.partition_rows, 1), f"{k}.partition_rows", "an integer >= 1",
                self.partition_rows)
        require(self.clicks in ("logged", "unbiased"), f"{k}.clicks", "'logged' or 'unbiased'", self.clicks)
        require(self.clicks == "logged" or self.source == "simulate", f"{k}.clicks",
                "'logged' unless data.source is 'simulate' (unbiased clicks are drawn from the simulator's truth)",
                self.clicks)

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting `page_features` parses it, there and only there: every reader takes `parsed_page_features`."""
        if name == "page_features":
            try:
                parsed = page_features_from_config(value, f"{self.KEY}.page_features")
            except SchemaError as e:
                raise ConfigError(str(e)) from None
            object.__setattr__(self, "parsed_page_features", parsed)
        object.__setattr__(self, name, value)

    parsed_page_features: ClassVar[tuple[PageFeature, ...]]   # set with page_features (not a config key)

    def declared_page_features(self) -> list[str]:
        """Names of the declared page features."""
        return [f.name for f in self.parsed_page_features]
