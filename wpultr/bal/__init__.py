"""BAL (WWW 2024): the method, its training rows, the influence estimators and importance weights, the weighted
click model, and its streamed preparation for the train stage (`streamed`). Its settings are `settings.bal`; the
biases read off a graph, the discover stage and the `wpultr discover`/`wpultr graph` commands, which every
graph-learning run uses, are in `causal`."""
