"""Identifiability of a click log (Chen et al., "Identifiability Matters", ICML 2024).

Can a click model separate a bias factor's effect from relevance on these logs? Theorem 1: the
relevance model is identifiable (up to scale) iff the identifiability graph (IG) over bias factors is
connected (`factor_graph`). When it is not, node intervention (online swaps, Eq. 3–6) or node merging (shared
observation of close bias factors, Eq. 7–8) connect it (`repair`); `preflight` runs the check before a
bias-modelling method trains, `cli` is `wpultr identifiability check`.
"""
