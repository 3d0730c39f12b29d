"""Reference graphs, pinned as causal-learn pins its benchmark outputs: each bench/worlds.py world's click parents as
the shipped discovery (pipelines/bal.yaml's `discovery` section, at test size: `SIZE`) finds them at a fixed seed, on
the sample bench/discovery.py's null part draws (`media_sample`: r̂ the true grade plus noise per (query, document)),
beside the world's true click parents. A change to discovery, the simulator or a world that moves a graph fails here
naming the world; a deliberate one updates `REFERENCE` (`python tests/test_reference_graphs.py` prints the table).

At this size ``position_only``, ``cascade`` and ``trust`` recover their true page-feature click parents exactly, with
no false one anywhere; ``production`` finds media type and position but not the result's on-screen height, and
``default`` (the simulator's defaults, whose media and height effects are weak) finds position alone: those effects
need more click rows than a test reads (bench/discovery.py's compare part reads ~10^5), so these two rows pin what
discovery finds at seed 0, and `NOT_RECOVERED` names what it misses.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench_scripts import load_bench_script

SEED = 0
SIZE = {"sessions": 3000, "kci_rows": 100, "click_rows": 10_000, "score_noise": 0.3}
RELEVANCE = "relevance_score"      # always a click parent: the prior keeps r̂ → click (never tested)

# world: (click parents found at SEED and SIZE, the world's true page-feature click parents)
REFERENCE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": (("position", RELEVANCE), ("media_type", "position", "serp_max_show_height")),
    "production": (("media_type", "position", RELEVANCE), ("media_type", "position", "serp_max_show_height")),
    "position_only": (("position", RELEVANCE), ("position",)),
    "cascade": (("position", RELEVANCE), ("position",)),
    "trust": (("position", RELEVANCE), ("position",)),
}
# worlds whose pinned parents are not their true ones at this size (module docstring)
NOT_RECOVERED = {"default": {"media_type", "serp_max_show_height"}, "production": {"serp_max_show_height"}}


@pytest.fixture(scope="module")
def bench():
    """bench/discovery.py (its sample) and bench/worlds.py, loaded as the scripts run."""
    return load_bench_script("discovery"), load_bench_script("worlds")


def found_click_parents(bench, world: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the click parents discovery finds in `world` at SEED and SIZE, the world's true page-feature click parents)."""
    from wpultr.causal.biases import identify_biases
    from wpultr.causal.discovery import discover
    discovery, worlds = bench
    cfg = replace(discovery.shipped_discovery(), n_sessions=SIZE["kci_rows"], click_rows=SIZE["click_rows"])
    sample = discovery.media_sample(worlds.WORLDS[world], SEED, SIZE["sessions"], cfg, SIZE["score_noise"])
    result = discover(sample.nodes, discovery.FEATURES, cfg, client=None, seed=SEED, click_nodes=sample.click_nodes)
    return (tuple(sorted(identify_biases(result.graph).click_parents)), tuple(sorted(sample.truth_click_parents)))


def test_every_world_has_a_reference(bench):
    """A new world fails until its graph is pinned; a pinned world that no longer exists is named."""
    assert sorted(REFERENCE) == sorted(bench[1].WORLDS)


@pytest.mark.parametrize("world", sorted(REFERENCE))
def test_a_worlds_click_parents_are_the_pinned_ones(bench, world):
    found, truth = found_click_parents(bench, world)
    pinned, pinned_truth = REFERENCE[world]
    assert truth == pinned_truth, f"{world}: the world's true click parents changed: {truth}"
    assert found == pinned, f"{world}: discovery found click parents {found}, pinned {pinned}"
    # the pinned table says what it claims: the truth recovered, but where NOT_RECOVERED names what is missed
    assert set(truth) - (set(found) - {RELEVANCE}) == NOT_RECOVERED.get(world, set())
    assert set(found) - {RELEVANCE} <= set(truth), f"{world}: a false click parent is pinned"


if __name__ == "__main__":      # print the table as found now, to paste into REFERENCE after a deliberate change
    loaded = (load_bench_script("discovery"), load_bench_script("worlds"))
    for name in loaded[1].WORLDS:
        print(f"    {name!r}: {found_click_parents(loaded, name)},")
