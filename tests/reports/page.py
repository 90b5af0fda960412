"""Read the reports page back as a person sees it: sections, table rows, chart parts."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any


@dataclass
class Cell:
    text: str
    classes: tuple[str, ...]
    header: bool


@dataclass
class Section:
    kind: str  # "summary" or "tenant"
    heading: str = ""
    text: list[str] = field(default_factory=list)
    rows: list[list[Cell]] = field(default_factory=list)  # of every table, in order
    svgs: list[str] = field(default_factory=list)  # each chart's markup


class _Reader(HTMLParser):
    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page = page
        self.sections: list[Section] = []
        self._cell: Cell | None = None
        self._in_heading = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = tuple((dict(attrs).get("class") or "").split())
        if tag == "section":
            self.sections.append(Section(classes[0] if classes else ""))
        if not self.sections:
            return
        section = self.sections[-1]
        if tag == "h2":
            self._in_heading = True
        elif tag == "tr":
            section.rows.append([])
        elif tag in ("td", "th") and section.rows:
            self._cell = Cell("", classes, tag == "th")
            section.rows[-1].append(self._cell)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._cell = None
        if tag == "h2":
            self._in_heading = False

    def handle_data(self, data: str) -> None:
        if not self.sections:
            return
        section = self.sections[-1]
        section.text.append(data)
        if self._in_heading:
            section.heading += data
        if self._cell is not None:
            self._cell.text += data


def sections(page: str) -> list[Section]:
    reader = _Reader(page)
    reader.feed(page)
    svgs = re.findall(r"<section.*?</section>", page, re.DOTALL)
    for section, markup in zip(reader.sections, svgs, strict=True):
        section.svgs = re.findall(r"<svg .*?</svg>", markup, re.DOTALL)
    return reader.sections


def tenant(page: str, name: str) -> Section:
    return next(s for s in sections(page) if s.kind == "tenant" and s.heading == name)


def class_row(section: Section, gpu_class: str) -> list[Cell]:
    return next(r for r in section.rows if r and not r[0].header and r[0].text == gpu_class)


def cells_of(row: list[Cell], css: str) -> list[str]:
    return [c.text for c in row if css in c.classes]


def rects(svg: str) -> dict[str, dict[str, float]]:
    """Bar title ("h100 usage: 6") -> its x, y, width, height."""
    found: dict[str, dict[str, float]] = {}
    pattern = (
        r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"[^>]*>'
        r"<title>([^<]*)</title>"
    )
    for x, y, width, height, title in re.findall(pattern, svg):
        found[title] = {
            "x": float(x),
            "y": float(y),
            "width": float(width),
            "height": float(height),
        }
    return found


def polylines(svg: str) -> list[dict[str, Any]]:
    """Each line of a line chart: its points, colour, and whether it is a band (wide and pale)
    or dashed."""
    lines = []
    for points, attributes in re.findall(r'<polyline points="([^"]*)"([^>]*)/>', svg):
        pairs = [tuple(float(v) for v in p.split(",")) for p in points.split()]
        hue = re.search(r'stroke="([^"]*)"', attributes)
        lines.append(
            {
                "points": pairs,
                "color": hue.group(1) if hue else "",
                "band": "stroke-opacity" in attributes,
                "dashed": "stroke-dasharray" in attributes,
            }
        )
    return lines


def cards(page: str) -> dict[str, dict[str, str]]:
    """The cluster summary's class cards: class -> figure label -> value as shown."""
    found = {}
    for name, pairs in re.findall(r'<div class="card"><h3>([^<]*)<.*?<dl>(.*?)</dl>', page):
        found[html.unescape(name)] = {
            html.unescape(k): html.unescape(v)
            for k, v in re.findall(r"<dt>([^<]*)</dt><dd>([^<]*)</dd>", pairs)
        }
    return found
