"""Headless Chromium driven as a plain binary (no Python browser package is needed offline).

The page is loaded at a given window size with a small script appended that measures its layout
and writes the facts into the DOM as JSON; `--dump-dom` prints the DOM back and the facts are
read from it. The page itself has no scripts: the measuring one is the test's, not the product's.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_SECONDS = 90
FACTS = re.compile(r'<pre id="qg-layout-facts">(.*?)</pre>', re.DOTALL)

# Boxes are in page coordinates (scroll offsets added), so they compare across the page.
# A bar is "covered" when a point of a 5 x 3 grid inside it hits anything but the bar itself or
# a thin line drawn across it (a grid line, the max tick).
MEASURE = """
<script id="qg-measure">
window.addEventListener('load', () => {
  const box = (el) => {
    const r = el.getBoundingClientRect();
    return {left: r.left + scrollX, right: r.right + scrollX, top: r.top + scrollY,
            bottom: r.bottom + scrollY, width: r.width, height: r.height};
  };
  const shown = (el) => {
    const style = getComputedStyle(el);
    return style.display !== 'none' && style.visibility !== 'hidden';
  };
  const bars = [];
  for (const rect of document.querySelectorAll('svg.bars rect')) {
    const title = rect.querySelector('title');
    if (!title) continue;
    rect.scrollIntoView({block: 'center', inline: 'center'});
    const r = rect.getBoundingClientRect();
    const over = [];
    for (const fx of [0.1, 0.3, 0.5, 0.7, 0.9]) {
      for (const fy of [0.2, 0.5, 0.8]) {
        const hit = document.elementFromPoint(r.left + r.width * fx, r.top + r.height * fy);
        if (hit === rect || (hit !== null && rect.contains(hit))) continue;
        if (hit !== null && hit.tagName === 'line') continue;  // a grid line or max tick
        over.push(hit === null ? 'nothing' : hit.tagName);
      }
    }
    bars.push({title: title.textContent, height: r.height, width: r.width,
               covered: r.height > 0 && over.length > 0, coveredBy: over});
  }
  window.scrollTo(0, 0);
  const root = document.documentElement;
  const facts = {
    innerWidth: window.innerWidth,
    clientWidth: root.clientWidth,
    scrollWidth: root.scrollWidth,
    bodyScrollWidth: document.body.scrollWidth,
    summary: document.querySelector('section.summary') &&
      box(document.querySelector('section.summary')),
    tenants: [...document.querySelectorAll('section.tenant')].map(
      (s) => ({name: s.querySelector('h2').textContent, box: box(s)})),
    charts: [...document.querySelectorAll('svg')].map((svg) => {
      const title = svg.querySelector('text.title');
      const drawn = title ? title.getBBox() : {x: 0, width: 0};
      return {label: svg.getAttribute('aria-label'), kind: svg.getAttribute('class'),
              box: box(svg), shown: shown(svg),
              titleFits: drawn.x + drawn.width <= svg.viewBox.baseVal.width};
    }),
    reasons: [...document.querySelectorAll('tr.why span')].map((s) => ({
      text: s.textContent, right: box(s).right, boxRight: box(s.closest('.scroll')).right,
      overflows: s.scrollWidth > s.clientWidth + 1})),
    tables: [...document.querySelectorAll('table')].map((t) => ({
      kind: t.className, box: box(t.parentElement), tableWidth: t.scrollWidth,
      boxWidth: t.parentElement.clientWidth,
      overflowX: getComputedStyle(t.parentElement).overflowX})),
    bars: bars,
  };
  const out = document.createElement('pre');
  out.id = 'qg-layout-facts';
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
});
</script>
"""


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def find_chromium() -> str | None:
    explicit = os.environ.get("QUOTAGUARD_CHROMIUM")
    if explicit:
        return explicit
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


def chromium_or_skip() -> str:
    """The binary; locally a skip with the reason when there is none, under CI=true a failure
    (CI must check the page's layout, as it must run e2e)."""
    found = find_chromium()
    if found:
        return found
    if _truthy("CI"):
        pytest.fail(
            "Chromium not found: CI must check the reports page in a browser "
            "(.ci/run installs it with `apt-get install -y chromium`)"
        )
    pytest.skip(
        "Chromium not found (`apt-get install -y chromium`, or QUOTAGUARD_CHROMIUM=/path): "
        "the reports page's layout in a browser is not checked"
    )


def _run(binary: str, workdir: Path, width: int, height: int, *action: str) -> str:
    command = [
        binary,
        "--headless",
        "--no-sandbox",  # as root (CI runs as root) Chromium refuses to start sandboxed
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        f"--user-data-dir={workdir / 'profile'}",
        f"--window-size={width},{height}",
        *action,
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def layout_facts(
    binary: str, page: str, workdir: Path, *, width: int, height: int = 1200
) -> dict[str, Any]:
    """Load `page` at `width` x `height` and return what the measuring script found.

    With QUOTAGUARD_SCREENSHOT_DIR set, a screenshot of the page is written there too (for a
    person to look at; the assertions are on the measured facts)."""
    workdir.mkdir(parents=True, exist_ok=True)
    measured = workdir / "measured.html"
    measured.write_text(page.replace("</body>", MEASURE + "</body>", 1), encoding="utf-8")
    dom = _run(binary, workdir, width, height, "--dump-dom", measured.as_uri())
    found = FACTS.search(dom)
    assert found, f"the measuring script wrote nothing: {dom[-1000:]}"
    if shots := os.environ.get("QUOTAGUARD_SCREENSHOT_DIR"):
        plain = workdir / "page.html"
        plain.write_text(page, encoding="utf-8")
        target = Path(shots) / f"{workdir.name}-{width}.png"
        _run(binary, workdir, width, height, f"--screenshot={target}", plain.as_uri())
    facts: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return facts
