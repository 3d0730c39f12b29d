"""The experiment report's MCC-against-K table is drawn only for a sweep over K: `wpultr experiment lbd.yaml
--report-only` on a partly finished run crashed (KeyError) because its η settings all have K = 1, so their columns
shared the name "K=1" and one setting's finished seeds were read for another."""
from wpultr.experiment.identifiability_tables import k_sweeps


def test_settings_that_share_a_k_are_no_sweep_over_k():
    lbd = {f"sim_eta{e}": ("synthetic", 1.0) for e in (0, 0.1, 0.3)} | {"letor_eta0": ("letor", 1.0),
                                                                       "letor_eta0.1": ("letor", 1.0)}
    assert k_sweeps(lbd) == {}


def test_one_setting_per_k_is_a_sweep_in_k_order_per_corpus():
    study = {"k3": ("onehot", 3.0), "k1": ("onehot", 1.0), "k2": ("onehot", 2.0), "letor_k1": ("letor", 1.0)}
    assert k_sweeps(study) == {"onehot": [("k1", 1.0), ("k2", 2.0), ("k3", 3.0)]}   # one setting alone: no sweep
    assert k_sweeps({**study, "k2_more_sessions": ("onehot", 2.0)}) == {}             # K = 2 twice: ambiguous
