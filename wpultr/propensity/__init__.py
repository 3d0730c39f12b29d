"""Influence estimators p(x_i | parents) and the importance weights built from them (BAL §3.1–3.2)."""
from .influence import (ConditionalDensity, FeatureInfluence, InfluenceConfig, fit_influence_estimators,
                        load_influence_estimators, save_influence_estimators)
from .weights import ImportanceWeights, WeightConfig, effective_sample_size, importance_weights

__all__ = ["ConditionalDensity", "FeatureInfluence", "InfluenceConfig", "fit_influence_estimators",
           "load_influence_estimators", "save_influence_estimators", "ImportanceWeights", "WeightConfig",
           "effective_sample_size", "importance_weights"]
