"""Position and joint examination propensities, and the pair weights made from them, that the baselines estimate."""
