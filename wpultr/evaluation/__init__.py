"""Evaluation, in one place: the metrics' one definition (`metrics`: DCG/ERR/nDCG, the click log-likelihood and
perplexity, the paired t-test), a saved ranker scored on annotated queries (`annotated.evaluate_ranker`), the run's
click models on held-out sessions (`click_metrics`) and, on simulated logs, the learned biases against the truth
(`truth_metrics`: MCC, click MSE)."""
