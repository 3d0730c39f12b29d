"""Aligned plain-text tables for people (`--json` prints the same data for machines): one look and one rounding
for every command's output (evaluate, ingest, status, stage lines, compare, the verdict). Standard library only, so
the quick commands stay quick."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def number(value: Any, digits: int = 4) -> str:
    """A cell: integers as they are, floats to `digits` significant places (p-values and tiny numbers in
    scientific notation), None/NaN as '-'."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value != 0 and (abs(value) < 10 ** -(digits - 1) or abs(value) >= 10 ** 7):
            return f"{value:.{max(digits - 2, 1)}e}"
        return f"{value:.{digits}g}" if abs(value) >= 10 ** digits else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return str(value)


def fixed(value: Any, places: int = 4) -> str:
    """A cell with a fixed number of decimal places (a column of one metric rounds alike); '-' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{places}f}"
    return str(value)


def pvalue(p: Any) -> str:
    """A p-value: 3 decimals down to 0.001, then '<0.001'; '-' for none."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1, indent: str = "",
          text_last: bool = False) -> str:
    """Columns padded to their widest cell: the first `left` columns (names) left-aligned, the rest (numbers)
    right-aligned, but the last when `text_last` (a note, unpadded). Cells that are not strings go through
    `number`."""
    cells = [[str(h) for h in header]] + [[c if isinstance(c, str) else number(c) for c in row] for row in rows]
    widths = [max(len(r[i]) if i < len(r) else 0 for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        parts = [(c.ljust(w) if i < left or (text_last and i == len(widths) - 1) else c.rjust(w))
                 for i, (c, w) in enumerate(zip(r, widths, strict=False))]
        lines.append((indent + "  ".join(parts)).rstrip())
    return "\n".join(lines)
