"""Influence estimators p(x_i | parents) and the importance weights built from them (BAL §3.1–3.2):
`influence` (the conditional-density MLPs), `weights` (the ratios, clipping, ESS), `config` (their settings)."""
