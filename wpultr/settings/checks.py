"""The value checks every config section uses (finite numbers in an interval, integers at least some bound)."""
from __future__ import annotations

import math
from typing import Any


def finite(value: Any, low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = True) -> bool:
    """`value` is a finite number in the interval from `low` to `high` (open or closed at each end)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return False
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    return above and below


def int_at_least(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def int_in(value: Any, low: int, high: int) -> bool:
    return int_at_least(value, low) and value <= high
