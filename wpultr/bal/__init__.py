"""BAL (WWW 2024): the method, its training rows, the influence estimators and importance weights,
the weighted click model and its CLI (its settings are `settings.bal`; the biases read off a graph and the discover
stage, which every graph-learning run uses, are in `causal`)."""
