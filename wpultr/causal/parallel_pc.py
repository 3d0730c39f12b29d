"""Stable PC with each depth level's CI tests run in parallel on Dask, returning causal-learn's own graph.

With stable PC (causal-learn's default) the tests of depth d are fixed by the skeleton at the
level's start: for every node x, every neighbour y and every set S of d other neighbours of x, the
test x ⫫ y | S (causal-learn tests all of them, removing edges only when the level ends). So, level
by level:

1. replay causal-learn's `skeleton_discovery` up to depth d - 1 against the p-values computed so far
   (every call is a cache hit), which gives the level's starting skeleton;
2. list that level's tests with causal-learn's own rule, drop those already cached (the key is
   causal-learn's: (min(x, y), max(x, y) | sorted S)), and evaluate the rest in parallel on the Dask
   workers, which hold each data set once (scattered); tests sharing a conditioning set go to one
   task, and each worker keeps the test object it built for a data set across tasks and levels
   (`_WorkerTests`), so kernels, bases and fitted null models are computed once per worker;
3. stop where causal-learn's loop stops (max degree - 1 <= d, or the depth limit).

Then causal-learn's `pc` runs as published, handed the filled p-value cache through its own
`cache_path` mechanism: it recomputes nothing and returns exactly the graph (edge marks and
sepsets) of a serial run with the same test. An adjacency the background knowledge requires
(`kept_pairs`, BAL's r̂ → c) is never tested: causal-learn's skeleton phase would test it and could
remove it (its required edges only orient), so each of its tests enters the cache as p = 0 — the graph is
exactly causal-learn's with a test that never separates that pair — and is left out of `PCRun.p_values`.
Several data sets (bootstrap resamples) advance level by level together, so all their tests share the cluster.
Tests outside the skeleton phase (uc_rule 1/2, uc_priority 3/4) would be computed in that final serial pass;
`PCRun.final_pass_tests` counts them.
"""
from __future__ import annotations

import json
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from causallearn.graph.GraphClass import CausalGraph
from causallearn.search.ConstraintBased.PC import pc
from causallearn.utils.cit import CIT, CIT_Base, register_ci_test
from causallearn.utils.PCUtils.BackgroundKnowledge import BackgroundKnowledge
from causallearn.utils.PCUtils.SkeletonDiscovery import skeleton_discovery
from distributed import wait

from ..progress import gather

CITest = tuple[int, int, tuple[int, ...]]
_META_KEYS = ("data_hash", "method_name", "parameters_hash")


@dataclass(frozen=True)
class CITestSpec:
    """A causal-learn CI test: a method name causal-learn knows, or a CIT_Base subclass with a `registry_name`."""

    method: str | type
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The name `pc(indep_test=...)` resolves (a class is registered with causal-learn under its name)."""
        if isinstance(self.method, type):
            register_ci_test(self.method.registry_name, self.method)
            return self.method.registry_name
        return self.method

    def runs_locally(self, x: int, y: int) -> bool:
        """Whether the test of x and y is best run in the calling process, on the test object that keeps what it
        fitted (a CIT_Base subclass says so with a `local_test(options, x, y)` classmethod; others never)."""
        decide = getattr(self.method, "local_test", None) if isinstance(self.method, type) else None
        return bool(decide(self.options, x, y)) if decide is not None else False

    def build(self, data: np.ndarray) -> CIT_Base:
        if isinstance(self.method, type):
            return self.method(data, **self.options)
        return CIT(data, self.method, **self.options)


@dataclass
class PCRun:
    """causal-learn's result for one data set, with the p-values behind it and how they were computed."""

    graph: CausalGraph
    p_values: dict[str, float]
    levels: list[dict[str, Any]]        # per depth: tests evaluated, seconds
    final_pass_tests: int               # tests the final serial pass had to compute itself (0 for uc_rule 0)
    test: CIT_Base | None = field(default=None, repr=False)   # the calling process's test object (its caches)
    kept_untested: int = 0              # tests of `kept_pairs` PC asked for and never ran (p = 0 by the prior)

    @property
    def n_tests(self) -> int:
        return len(self.p_values)


def test_nodes(key: str) -> set[int]:
    """The node indices a causal-learn cache key names: 'x;y' or 'x;y|s1.s2…' (x, y may be dotted groups)."""
    return {int(i) for part in key.replace("|", ";").split(";") for i in part.split(".") if i}


def p_values_without(p_values: Mapping[str, float], nodes: set[int]) -> dict[str, float]:
    """The p-values of the tests that involve none of `nodes` (as X, Y or in the conditioning set)."""
    return {k: v for k, v in p_values.items() if k not in _META_KEYS and not (test_nodes(k) & nodes)}


def level_tests(cg: CausalGraph, depth: int) -> list[CITest]:
    """The tests causal-learn's stable skeleton discovery runs at `depth` on the skeleton `cg` holds."""
    tests: list[CITest] = []
    for x in range(cg.G.get_num_nodes()):
        neighbours = cg.neighbors(x)
        if len(neighbours) < depth - 1:
            continue
        for y in neighbours:
            others = np.delete(neighbours, np.where(neighbours == y))
            tests.extend((x, int(y), tuple(int(s) for s in S)) for S in combinations(others, depth))
    return tests


class _WorkerTests:
    """The CI tests a Dask worker process has built, one per (scattered data set, test spec), kept for the next task.

    A test object holds what it computed for earlier tests (kernels, spline bases, fitted null models of
    the click test); rebuilding it for every task redid that work in every task of every level, which made
    the hybrid test ~3x slower on a 2-worker cluster than serially. A scattered array is one object in the
    worker's memory for as long as its future lives, so its id (checked against a weak reference) names it.
    Only the `keep` most recent are kept, and `parallel_pc` clears them when it returns (a test holds its
    data and caches); a lock serialises tasks that share a test on a threaded worker.
    """

    def __init__(self, keep: int = 2):
        self.keep = keep
        self._tests: dict[tuple[int, str], tuple[Any, CIT_Base, threading.Lock]] = {}
        self._lock = threading.Lock()

    def get(self, data: np.ndarray, spec: CITestSpec) -> tuple[CIT_Base, threading.Lock]:
        key = (id(data), repr(spec))
        with self._lock:
            held = self._tests.get(key)
            if held is not None and held[0]() is data:
                self._tests[key] = self._tests.pop(key)                 # most recent last
                return held[1], held[2]
            entry = (weakref.ref(data), spec.build(data), threading.Lock())
            self._tests[key] = entry
            for stale in [k for k, v in self._tests.items() if v[0]() is None]:
                del self._tests[stale]
            while len(self._tests) > self.keep:
                del self._tests[next(iter(self._tests))]
            return entry[1], entry[2]


    def clear(self) -> None:
        with self._lock:
            self._tests.clear()


_WORKER_TESTS = _WorkerTests()


def _forget_tests() -> None:
    """Drop the tests this process keeps (run on every worker when a `parallel_pc` call ends: its data is gone)."""
    _WORKER_TESTS.clear()


def p_values(data: np.ndarray, spec: CITestSpec, tests: Sequence[CITest]) -> list[float]:
    """Evaluate `tests` on `data` (runs on a Dask worker), with the test this process built for them before."""
    test, lock = _WORKER_TESTS.get(data, spec)
    with lock:
        return [float(test(x, y, S)) for x, y, S in tests]


@dataclass
class _Progress:
    """One data set's walk through the PC levels."""

    data: np.ndarray
    test: CIT_Base                      # local instance whose cache collects every p-value
    handle: Any                         # the data on the cluster (a Future), or the array itself
    depth: int = -1
    levels: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    kept_keys: set[str] = field(default_factory=set)   # tests of a kept pair, recorded as p = 0, never run

    def skeleton(self, alpha: float, knowledge: BackgroundKnowledge | None, names: list[str]) -> CausalGraph:
        """The skeleton after levels 0..depth, replayed by causal-learn from the cache alone."""
        if self.depth < 0:
            return CausalGraph(self.data.shape[1], names)
        before = len(self.test.pvalue_cache)
        cg = skeleton_discovery(self.data, alpha, self.test, stable=True, background_knowledge=knowledge,
                                show_progress=False, node_names=names, max_k=self.depth)
        if len(self.test.pvalue_cache) != before:
            raise RuntimeError("parallel PC: replaying a level needed a test that was not precomputed")
        return cg


def _test_cost(group: list[CITest]) -> float:
    """Rough cost of one conditioning set's tests: its Rz once, each side's kernel once (kernel CI tests)."""
    if not group[0][2]:
        return 0.1 * len(group)
    sides = {(min(x, y), "x") for x, y, _ in group} | {(max(x, y), "y") for x, y, _ in group}
    return 1.0 + len(sides) + 0.1 * len(group)


def _task_parts(tests: list[CITest], n: int) -> list[list[CITest]]:
    """At most ~n tasks, tests of one conditioning set kept together (a worker then builds its kernels once).

    Groups are packed largest first into the least-loaded task; a group costing two or more fair
    shares is split (by x first), so the level still spreads over every worker.
    """
    n = max(1, min(n, len(tests)))
    groups: dict[tuple[int, ...], list[CITest]] = {}
    for t in tests:
        groups.setdefault(tuple(sorted(t[2])), []).append(t)
    fair = sum(_test_cost(g) for g in groups.values()) / n
    pieces: list[list[CITest]] = []
    for group in groups.values():
        group = sorted(group)
        k = max(1, min(len(group), int(_test_cost(group) / fair + 1e-9)))
        bounds = np.linspace(0, len(group), k + 1).astype(int)
        pieces.extend(group[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a)
    pieces.sort(key=_test_cost, reverse=True)
    tasks: list[list[CITest]] = [[] for _ in range(n)]
    load = [0.0] * n
    for piece in pieces:
        i = int(np.argmin(load))
        tasks[i].extend(piece)
        load[i] += _test_cost(piece)
    return [t for t in tasks if t]


def parallel_pc(datasets: Sequence[np.ndarray], node_names: Sequence[str], alpha: float, spec: CITestSpec, *,
                client: Any = None, background_knowledge: BackgroundKnowledge | None = None,
                max_depth: int | None = None, tasks_per_thread: int = 4,
                timeout: float | None = None,
                known_p_values: Sequence[Mapping[str, float] | None] | None = None,
                kept_pairs: Sequence[tuple[int, int]] = ()) -> list[PCRun]:
    """Run stable PC on every data set, each level's tests spread over `client` (in process if None).

    `known_p_values[i]` (causal-learn cache keys -> p-value) are taken as already computed on data set i
    and never re-run: a caller that knows a test's columns did not change (BAL's later epochs, whose
    sample is fixed and whose r̂ column alone moves) passes them to skip those tests.

    `kept_pairs` (node index pairs, the adjacencies background knowledge requires) are never tested: every
    test of such a pair is recorded as p = 0, so PC keeps the adjacency (module doc).

    `timeout` (seconds) raises TimeoutError once passed, cancelling what is queued on the cluster
    (tasks already running finish on their workers; `client.restart()` stops them).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    names = list(node_names)
    handles = client.scatter(list(datasets), broadcast=True, hash=False) if client is not None else list(datasets)
    threads = sum(client.nthreads().values()) if client is not None else 1
    runs = [_Progress(np.asarray(d), spec.build(np.asarray(d)), h) for d, h in zip(datasets, handles, strict=True)]
    kept = {frozenset(map(int, pair)) for pair in kept_pairs}
    for run, known in zip(runs, known_p_values or [], strict=False):
        run.test.pvalue_cache.update({k: float(v) for k, v in (known or {}).items() if k not in _META_KEYS})
    try:
        while True:
            batch: list[tuple[_Progress, list[CITest]]] = []
            for run in runs:
                if run.done:
                    continue
                cg = run.skeleton(alpha, background_knowledge, names)
                if not (cg.max_degree() - 1 > run.depth) or (max_depth is not None and run.depth + 1 > max_depth):
                    run.done = True
                    continue
                run.depth += 1
                todo: dict[str, CITest] = {}
                for x, y, S in level_tests(cg, run.depth):
                    key = run.test.get_formatted_XYZ_and_cachekey(x, y, S)[3]
                    if key in run.test.pvalue_cache:
                        continue
                    if frozenset((x, y)) in kept:                  # required by background knowledge: kept
                        run.test.pvalue_cache[key] = 0.0
                        run.kept_keys.add(key)
                    else:
                        todo.setdefault(key, (x, y, S))
                batch.append((run, list(todo.items())))
            if not batch:
                break
            _evaluate(batch, spec, client, threads * tasks_per_thread, deadline)
    finally:
        _forget_tests()                       # the tests hold this call's data and caches
        if client is not None:
            client.run(_forget_tests)
    return [_final_pass(run, names, alpha, spec, background_knowledge, max_depth) for run in runs]


def _check_deadline(deadline: float | None, depth: int) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"parallel PC: time limit reached during depth {depth}")


def _evaluate(batch: list[tuple[_Progress, list[tuple[str, CITest]]]], spec: CITestSpec, client: Any,
              n_tasks: int, deadline: float | None = None) -> None:
    """Compute every listed test of this round (all data sets together) and store the p-values."""
    start = time.perf_counter()
    jobs = []
    for run, keyed in batch:
        if not keyed:
            continue
        key_of = {t: k for k, t in keyed}
        local: list[CITest] = []
        remote: list[CITest] = []
        for _, t in keyed:
            (local if client is None or spec.runs_locally(t[0], t[1]) else remote).append(t)
        parts = _task_parts(remote, max(1, n_tasks // len(batch))) if remote else []
        futures = [client.submit(p_values, run.handle, spec, part, pure=False) for part in parts]
        jobs.append((run, [[key_of[t] for t in part] for part in parts], futures))
        for t in (_task_parts(local, 1)[0] if local else []):   # here (by conditioning set), while workers run theirs
            _check_deadline(deadline, run.depth)
            run.test.pvalue_cache[key_of[t]] = float(run.test(*t))
    if client is not None and deadline is not None and any(futures for _, _, futures in jobs):
        pending = [f for _, _, futures in jobs for f in futures]
        try:
            wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            client.cancel(pending)
            raise TimeoutError(f"parallel PC: time limit reached during depth {batch[0][0].depth}") from None
    for run, keys, futures in jobs:
        if not futures:
            continue
        results = gather(client, futures, desc=f"PC depth {run.depth}", unit="test", weights=[len(k) for k in keys])
        for part_keys, part in zip(keys, results, strict=True):
            run.test.pvalue_cache.update(zip(part_keys, part, strict=True))
    seconds = time.perf_counter() - start
    for run, keyed in batch:
        run.levels.append({"depth": run.depth, "tests": len(keyed), "seconds": round(seconds, 3)})


def _final_pass(run: _Progress, names: list[str], alpha: float, spec: CITestSpec,
                knowledge: BackgroundKnowledge | None, max_depth: int | None) -> PCRun:
    """causal-learn's own `pc`, reading the filled p-value cache from its cache file."""
    cache = dict(run.test.pvalue_cache)
    with tempfile.TemporaryDirectory(prefix="wpultr-pc-") as tmp:
        path = Path(tmp) / "pvalues.json"
        path.write_text(json.dumps(cache))
        cg = pc(run.data, alpha, spec.name, stable=True, background_knowledge=knowledge, show_progress=False,
                node_names=names, max_k=max_depth, cache_path=str(path), **spec.options)
    final = cg.test.pvalue_cache
    p = {k: float(v) for k, v in final.items() if k not in _META_KEYS and k not in run.kept_keys}
    return PCRun(cg, p, run.levels, final_pass_tests=len(final) - len(cache), test=run.test,
                 kept_untested=len(run.kept_keys))
