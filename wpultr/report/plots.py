"""Matplotlib's object API (no pyplot, no display) the way every wpultr figure uses it: the run report's, `wpultr
compare`'s and the experiment report's."""
from __future__ import annotations

import io


def new_figure(width: float, height: float):
    """A figure of `width` × `height` inches at 100 dpi with constrained layout, outside pyplot's state. Its text is
    never parsed as mathtext (`text.parse_math` off): run names and data values with `$` are drawn as written."""
    import matplotlib  # lazy: +0.9 s (matplotlib)
    from matplotlib.figure import Figure  # lazy: +0.9 s (matplotlib)
    matplotlib.rcParams["text.parse_math"] = False
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def colors(n: int) -> list:
    """n distinct colours: tab10, or tab20 past ten."""
    from matplotlib import colormaps  # lazy: +0.9 s (matplotlib)
    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes (to embed in a page: no file beside it to lose)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
