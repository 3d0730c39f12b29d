"""A page as headless Chromium lays it out (issue 44 item 5): no Python dependency — Chromium's own headless
`--dump-dom` runs a probe script added to a copy of the page and prints the DOM it leaves, in which the probe wrote
what it measured: the viewport and document widths, the elements that run past the right edge, every image's
decoded width, each graph panel's drawn edges, and every error the page raised or logged."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

_FIRST = ("<script>window.__errors=[];addEventListener('error',e=>window.__errors.push(String(e.message||"
          "(e.target&&(e.target.src||e.target.outerHTML).slice(0,80)))),true);const __ce=console.error;"
          "console.error=function(){window.__errors.push([...arguments].join(' '));__ce.apply(console,arguments)};"
          "</script>")
_PROBE = ("<script>addEventListener('load',()=>{const w=innerWidth;const r={width:w,"
          "scrollWidth:document.documentElement.scrollWidth,"
          "overflowing:[...document.querySelectorAll('body *')].filter(e=>e.getBoundingClientRect().right>w+1&&"
          "!e.parentElement.closest('.scroll,.graph-panel,pre,details')).slice(0,8).map(e=>e.tagName+"
          "(e.className&&typeof e.className==='string'?'.'+e.className:'')),"
          "images:[...document.images].map(i=>[i.alt,i.naturalWidth]),"
          "panels:[...document.querySelectorAll('.graph-panel')].map(p=>[p.dataset.epoch,"
          "[...p.querySelectorAll('g.edge')].map(g=>[g.dataset.from,g.dataset.to,g.dataset.type])]),"
          "errors:window.__errors};const out=document.createElement('pre');out.id='wpultr-probe';"
          "out.style.display='none';out.textContent=JSON.stringify(r);document.body.appendChild(out);});</script>")


def find_browser() -> str | None:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def _command(browser: str, width: int, height: int) -> list[str]:
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", f"--window-size={width},{height}"]


def probe(page: Path, workdir: Path, width: int = 1400, height: int = 1000) -> dict:
    """What the page is at `width` px: see the module doc. A copy with the probe goes to `workdir`."""
    browser = find_browser()
    text = page.read_text(encoding="utf-8")
    head = text.index("<head>") + len("<head>")
    body_end = text.rindex("</body>")
    probed = workdir / f"probed-{page.name}"
    probed.write_text(text[:head] + _FIRST + text[head:body_end] + _PROBE + text[body_end:], encoding="utf-8")
    run = subprocess.run(_command(browser, width, height) + ["--virtual-time-budget=15000", "--dump-dom",
                                                             probed.resolve().as_uri()],
                         capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(workdir)})
    found = re.search(r"<pre id=\"wpultr-probe\"[^>]*>(.*?)</pre>", run.stdout, re.S)
    if not found:
        raise AssertionError(f"no probe result (exit {run.returncode}): {run.stderr[-2000:]}")
    result = json.loads(html.unescape(found.group(1)))
    result["stderr_errors"] = [line for line in run.stderr.splitlines() if "Uncaught" in line or "CONSOLE" in line]
    return result


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 4000) -> Path:
    """A PNG of the page at `width` px (for a person to look at)."""
    subprocess.run(_command(find_browser(), width, height) + [f"--screenshot={out}", page.resolve().as_uri()],
                   capture_output=True, timeout=180, env={**os.environ, "HOME": str(out.parent)})
    return out
