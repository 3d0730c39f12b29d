"""The train stage finds a method's streamed fit through its MethodSpec (`streamed_fit`), never by its name."""
from __future__ import annotations

import inspect

import pytest

from wpultr.pipeline import stages
from wpultr.settings.methods import METHODS


@pytest.mark.parametrize("name", sorted(n for n, spec in METHODS.items() if spec.streamed_fit))
def test_a_declared_streamed_fit_imports_and_takes_the_stages_arguments(name):
    fit = stages.streamed_fit(name)
    assert callable(fit) and fit is not stages._shared_streamed_fit
    assert list(inspect.signature(fit).parameters) == ["sessions_path", "valid", "cfg", "run_root"]


def test_bal_streams_through_its_own_preparation_and_the_others_through_the_shared_trainer():
    from wpultr.bal.streamed import fit_streamed
    assert stages.streamed_fit("bal") is fit_streamed
    shared = [n for n, spec in METHODS.items() if spec.streaming and not spec.streamed_fit]
    assert shared and all(stages.streamed_fit(n) is stages._shared_streamed_fit for n in shared)


def test_a_streamed_fit_is_declared_only_by_a_method_that_streams():
    assert [n for n, spec in METHODS.items() if spec.streamed_fit and not spec.streaming] == []
