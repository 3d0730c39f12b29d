"""The hybrid CI test (`discovery.ci_test: hybrid`): edges into click on every shown result, the rest by KCI.

A causal-learn CI test (so PC, the priors and the level-parallel replay of `parallel_pc` are unchanged)
that dispatches on whether click is one of the two variables:

* x ⫫ click | S: `click_ci.ClickCITest` (flexible logistic models, score test robust to within-session
  dependence) on `click_rows` shown results of whole sessions: ~100 clicks at n = 1000 cannot show a 2×
  media effect, 10^4 clicks can. S loses the near-deterministic proxies of x (`near_determinism`).
* any other pair: KCI (the paper's test, `PageFeatureCIT`: categorical nodes as one-hot groups) on the
  one-result-per-session sample, where the signals between page features and r̂ are strong.

With each click row's (query, document) known (`documents`), a page feature's click test is the
within-document one (`within_document_ci`, `discovery.click_test: within_document`): impressions of the same
result are compared, so relevance r̂ misses cannot pass for a page effect; a feature that hardly varies within
documents (`untestable`) is not tested (p = 1: no edge). r̂'s own test stays the r̂-conditioned one.

causal-learn's PC takes one data matrix, and `parallel_pc` ships that matrix to the Dask workers once,
so both row sets travel stacked in it: the first `n_sample` rows are the KCI sample, the others the
click rows, whose click column holds click + 2 · (session index + n_sessions · document index) (sessions
are the clusters of the robust test, documents the strata of the within-document one; the click is the
code's parity). `stack_click_rows` and `split_click_rows` are the two ends.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from causallearn.utils.cit import CIT_Base

from .click_ci import ClickCITest
from .kci import DEFAULT_CACHE_MIB
from .page_feature_cit import PageFeatureCIT
from .within_document_ci import WithinDocumentTest


def stack_click_rows(sample: np.ndarray, click_rows: np.ndarray, sessions: np.ndarray, click: int,
                     documents: np.ndarray | None = None) -> np.ndarray:
    """One matrix holding the KCI sample, then the click rows with each row's session (and document, when given)
    folded into the click code."""
    _, index = np.unique(sessions, return_inverse=True)
    index = index.ravel().astype(np.float64)
    rows = np.array(click_rows, dtype=np.float64, copy=True)
    if not np.isin(rows[:, click], (0.0, 1.0)).all():
        raise ValueError("hybrid CI test: the click column must hold 0/1 values")
    if documents is not None:
        doc_index = np.unique(documents, return_inverse=True)[1].ravel().astype(np.float64)
        index += (index.max() + 1.0 if len(index) else 0.0) * doc_index
        if len(index) and 2.0 * index.max() >= 2.0 ** 52:
            raise ValueError("hybrid CI test: too many sessions × documents to fold into the click code")
    rows[:, click] += 2.0 * index
    return np.vstack([np.asarray(sample, dtype=np.float64), rows])


def split_click_rows(data: np.ndarray, n_sample: int, click: int, n_sessions: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(KCI sample, click rows with plain 0/1 clicks, session index of each click row, document index of each
    click row or None); `n_sessions`: the click rows' number of sessions when documents were folded in."""
    rows = np.array(data[n_sample:], dtype=np.float64, copy=True)
    code = rows[:, click]
    folded = np.floor(code / 2.0).astype(np.int64)
    rows[:, click] = code - 2.0 * folded
    if n_sessions is None:
        return data[:n_sample], rows, folded, None
    return data[:n_sample], rows, folded % n_sessions, folded // n_sessions


def resample_sessions(click_rows: np.ndarray, sessions: np.ndarray,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A bootstrap resample of whole sessions (drawn with replacement, each draw a new session id)."""
    order = np.argsort(sessions, kind="stable")
    _, first, counts = np.unique(sessions[order], return_index=True, return_counts=True)
    draw = rng.integers(0, first.size, first.size)
    sizes = counts[draw]
    within = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    take = order[np.repeat(first[draw], sizes) + within]
    return click_rows[take], np.repeat(np.arange(draw.size), sizes)


class HybridCIT(CIT_Base):
    """causal-learn CI test over the stacked matrix of `stack_click_rows` (see the module docstring).

    `protect` lists (feature, proxy) node indices, the feature nearly a function of the proxy: a test of
    the feature against click drops the proxy from the conditioning set. The p-value of a click test is
    recorded with the conditioning set PC asked for, so PC's sepsets keep its own bookkeeping.
    """

    registry_name = "wpultr-hybrid"

    def __init__(self, data: np.ndarray, n_sample: int, click: int, relevance: int | None = None,
                 categorical: Sequence[int] = (), protect: Sequence[Sequence[int]] = (), n_knots: int = 5,
                 seed: int = 0, kci_options: dict[str, Any] | None = None, engine: str = "cached",
                 cache_mib: int = DEFAULT_CACHE_MIB, n_click_sessions: int | None = None,
                 position: int | None = None, untestable: Sequence[int] = (), **kwargs: Any):
        super().__init__(data, **kwargs)
        fingerprint = json.dumps({"n_sample": n_sample, "click": click, "relevance": relevance,
                                  "categorical": sorted(categorical), "protect": sorted(map(list, protect)),
                                  "n_knots": n_knots, "seed": seed, "kci": kci_options or {}, "engine": engine,
                                  "n_click_sessions": n_click_sessions, "position": position,
                                  "untestable": sorted(untestable)}, sort_keys=True)
        self.check_cache_method_consistent("wpultr-hybrid", hashlib.md5(fingerprint.encode()).hexdigest())
        self.assert_input_data_is_valid()
        self.data = data
        self.n_sample, self.click, self.relevance = n_sample, click, relevance
        self.categorical, self.n_knots, self.seed = list(categorical), n_knots, seed
        self.kci_options, self.engine, self.cache_mib = dict(kci_options or {}), engine, cache_mib
        self.proxies: dict[int, set[int]] = {}
        for feature, proxy in protect:
            self.proxies.setdefault(int(feature), set()).add(int(proxy))
        self.n_click_sessions, self.position = n_click_sessions, position
        self.untestable = set(int(u) for u in untestable)
        self._kci = None
        self._click: ClickCITest | None = None
        self._within: WithinDocumentTest | None = None

    @classmethod
    def local_test(cls, options: dict[str, Any], x: int, y: int) -> bool:
        """`parallel_pc` runs the click tests in the calling process: they share fitted null models (one per
        conditioning set, reused across levels and by the edge evidence) that a worker per task would refit."""
        return options["click"] in (x, y)

    @property
    def within_documents(self) -> bool:
        """Whether page-feature click tests are within-document ones (the click rows carry their documents)."""
        return self.n_click_sessions is not None

    @property
    def click_test(self) -> ClickCITest:
        if self._click is None:
            _, rows, sessions, _ = split_click_rows(self.data, self.n_sample, self.click, self.n_click_sessions)
            self._click = ClickCITest(rows, self.click, sessions, self.categorical, self.relevance, self.n_knots)
        return self._click

    @property
    def within_test(self) -> WithinDocumentTest:
        if self._within is None:
            if not self.within_documents:
                raise ValueError("hybrid CI test: the click rows carry no documents (n_click_sessions is None)")
            _, rows, sessions, documents = split_click_rows(self.data, self.n_sample, self.click,
                                                            self.n_click_sessions)
            self._within = WithinDocumentTest(rows, self.click, sessions, documents, self.categorical,
                                              self.position, self.relevance, self.n_knots)
        return self._within

    def click_p_value(self, x: int, S: Sequence[int]) -> float:
        """p of x ⫫ click | S: within documents for a page feature when the rows allow it (1 for an untestable
        one), else the r̂-conditioned test; x's near-deterministic proxies left out of S."""
        S = self.conditioning_for_click(x, S)
        if not self.within_documents or x == self.relevance:
            return self.click_test.p_value(x, S)
        if x in self.untestable:
            return 1.0
        return self.within_test.p_value(x, S)

    def conditioning_for_click(self, x: int, S: Sequence[int]) -> list[int]:
        """S without the near-deterministic proxies of x."""
        return [int(s) for s in S if int(s) not in self.proxies.get(int(x), set())]

    def __call__(self, X, Y, condition_set=None):
        Xs, Ys, S, key = self.get_formatted_XYZ_and_cachekey(X, Y, condition_set)
        if key in self.pvalue_cache:
            return self.pvalue_cache[key]
        x, y = Xs[0], Ys[0]
        if self.click in (x, y):
            other = y if x == self.click else x
            p = self.click_p_value(int(other), S)
        else:
            if self._kci is None:
                self._kci = PageFeatureCIT(np.ascontiguousarray(self.data[:self.n_sample]), base="kci",
                                           categorical=self.categorical, seed=self.seed,
                                           base_options=self.kci_options, engine=self.engine,
                                           cache_mib=self.cache_mib)
            p = self._kci(x, y, S)
        self.pvalue_cache[key] = p
        return p
