"""BAL (WWW 2024) in one place: the method, its settings, the biases read off the graph, the influence
estimators and importance weights, the weighted click model, the discover stage and its CLI."""
