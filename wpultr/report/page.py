"""The one page shell every HTML page of wpultr uses (the run report, `wpultr compare`, the experiment report): the
style, the page, tables and embedded PNGs. Kept apart from the report's sections so that any section's module can
use it without importing the report."""
from __future__ import annotations

import base64
import html
from typing import Any

PAGE_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1500px;margin:2em auto;padding:0 1.5em}"
              "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;"
              "text-align:right;white-space:nowrap}td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}td.text{white-space:normal;text-align:left;"
              "min-width:20em}.scroll{max-width:100%;overflow-x:auto}pre{background:#f8f8f8;padding:1em;"
              "overflow:auto;max-height:40em}img{max-width:100%;height:auto}figure{margin:1em 0}"
              "figcaption{font-weight:bold;margin:.3em 0}.graphs{display:flex;flex-wrap:wrap;gap:1em}"
              ".graph-panel{max-width:100%;overflow-x:auto}.no-edge,.figure-note{font-size:.9em;color:#444}"
              ".verdict{border-left:4px solid #1f4e79;padding-left:1em}.warnings li{color:#8a1c1c}"
              "details summary{cursor:pointer}")


def page(title: str, body: str, style: str = "") -> str:
    """A self-contained HTML page (the run report, `wpultr compare`, the experiment report): one look for all."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{PAGE_STYLE}{style}</style></head><body>{body}</body></html>")


def png_img(data: bytes, alt: str) -> str:
    """A PNG embedded in the page as base64 (no file beside the page to lose)."""
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(data).decode('ascii')}'>"


def _table(rows: list[list[Any]], header: list[str]) -> str:
    """A table in a box that scrolls sideways when it is wider than the page (the page itself never does); a
    cell of prose (a string of 40 characters or more) wraps, numbers never break."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _td(value: Any) -> str:
    prose = isinstance(value, str) and len(value) >= 40 and " " in value
    return f"<td class='text'>{_cell(value)}</td>" if prose else f"<td>{_cell(value)}</td>"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return html.escape(str(value))
