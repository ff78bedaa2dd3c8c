"""Inline SVG drawings, built with the escaping `tag()`: a Pipeline's stage graph (a box
per stage coloured by phase, showing its duration and cost and linking to its Job's page,
edges from dependsOn labelled with the inputs handed over) and a Sweep's scatter chart
(cost against units per second, one point per cell), as wide as the page."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from nodus_gitops.output import money
from nodus_gitops.web.html import Safe, phase_slug, tag

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 72, 80, 26, 12


@dataclass(frozen=True)
class StageFacts:
    """What a stage's box shows beyond its name and phase: its Job's page (None while it
    has no Job), how long it ran and what it cost, as text."""

    href: str | None
    duration: str
    cost: str


def _short(text: str, most: int = 22) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _layers(stages: list[dict[str, Any]]) -> dict[str, int]:
    """Each stage's column: 0 for roots, else one more than its deepest dependency."""
    deps = {s["name"]: dependencies(s) for s in stages}
    layer: dict[str, int] = {}
    for _ in range(len(stages) + 1):  # a cycle (rejected by validation) cannot loop forever
        changed = False
        for name, ds in deps.items():
            known = [layer.get(d, 0) for d in ds if d in deps]
            value = 1 + max(known) if known else 0
            if layer.get(name) != value and value <= len(stages):
                layer[name] = value
                changed = True
        if not changed:
            break
    return layer


def dependencies(stage: dict[str, Any]) -> list[str]:
    """The stages `stage` waits for: its dependsOn and the stages its inputs come from."""
    found = [str(d) for d in stage.get("dependsOn") or []]
    for inp in stage.get("inputs") or []:
        if isinstance(inp, dict) and inp.get("fromStage") and inp["fromStage"] not in found:
            found.append(str(inp["fromStage"]))
    return found


def pipeline_graph(spec: dict[str, Any], status: dict[str, Any],
                   facts: dict[str, StageFacts] | None = None) -> Safe:
    stages = [s for s in spec.get("stages") or [] if isinstance(s, dict) and s.get("name")]
    if not stages:
        return Safe("")
    phases = {s.get("name"): s.get("phase") for s in status.get("stages") or []
              if isinstance(s, dict)}
    layer = _layers(stages)
    rows: dict[int, int] = {}
    pos: dict[str, tuple[int, int]] = {}
    for s in stages:
        col = layer.get(s["name"], 0)
        row = rows.get(col, 0)
        rows[col] = row + 1
        pos[s["name"]] = (PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    width = PAD * 2 + (max(layer.values(), default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max(rows.values()) * (BOX_H + GAP_Y) - GAP_Y
    edges, nodes = [], []
    for s in stages:
        x2, y2 = pos[s["name"]]
        for dep in dependencies(s):
            if dep not in pos:
                continue
            x1, y1 = pos[dep]
            ax, ay, bx, by = x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2
            mid = (ax + bx) // 2
            d = f"M{ax},{ay} C{mid},{ay} {mid},{by} {bx - 6},{by}"
            names = [str(i.get("name")) for i in s.get("inputs") or []
                     if isinstance(i, dict) and i.get("fromStage") == dep]
            edge = [tag("path", d=d, class_="edge", marker_end="url(#arrow)",
                        data_from=dep, data_to=s["name"])]
            if names:
                edge.append(tag("text", ", ".join(names), x=mid, y=(ay + by) // 2 - 5,
                                class_="edge-label", text_anchor="middle"))
            edges.append(tag("g", *edge, class_="edge-group"))
        x, y = pos[s["name"]]
        phase = phases.get(s["name"]) or "Pending"
        fact = (facts or {}).get(s["name"])
        node = tag(
            "g",
            tag("title", f"{s['name']}: {phase}"),
            tag("rect", x=x, y=y, width=BOX_W, height=BOX_H, rx=7, class_="node-box"),
            tag("text", _short(s["name"]), x=x + 10, y=y + 20, class_="node-name"),
            tag("text", phase, x=x + 10, y=y + 38, class_="node-phase", data_field="phase"),
            tag("text", fact.duration if fact else "-", x=x + 10, y=y + 56,
                class_="node-duration", data_field="duration"),
            tag("text", fact.cost if fact else "-", x=x + BOX_W - 10, y=y + 56,
                class_="node-cost", data_field="cost", text_anchor="end"),
            class_=f"node {phase_slug(phase)}", data_stage=s["name"])
        if fact is not None and fact.href:
            node = tag("a", node, href=fact.href, class_="node-link",
                       aria_label=f"stage {s['name']}: {phase}, {fact.duration}, {fact.cost}")
        nodes.append(node)
    defs = tag("defs", tag("marker", tag("path", d="M0,0 L8,4 L0,8 z", class_="arrow-head"),
                           id="arrow", markerWidth=8, markerHeight=8, refX=2, refY=4,
                           orient="auto"))
    return tag("svg", defs, *edges, *nodes, xmlns="http://www.w3.org/2000/svg",
               viewBox=f"0 0 {width} {height}", width=width, height=height,
               class_="pipeline-graph", role="img", aria_label="stage graph")


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _axis(largest: float, count: int = 4) -> tuple[float, list[float]]:
    """A round top for an axis reaching `largest`, and its `count + 1` ticks from 0."""
    if largest <= 0:
        largest = 1.0
    magnitude = 10 ** math.floor(math.log10(largest / count))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude * count >= largest)
    return step * count, [step * i for i in range(count + 1)]


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    if value == 0:
        return "0"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}".rstrip("0").rstrip(".")


def tick_text(value: float, step: float) -> str:
    """A tick's value with the decimals its axis's step needs, never in exponent form:
    `0.000004` on an axis of millionths, `2.5` on one of halves, `250` on one of hundreds."""
    exponent = Decimal(f"{step:.3g}").normalize().as_tuple().exponent if step > 0 else 0
    places = max(0, -exponent) if isinstance(exponent, int) else 0
    return f"{value:.{places}f}" if value else "0"


def plotted(status: dict[str, Any]) -> list[tuple[dict[str, Any], float, float]]:
    """The cells the chart plots, each with its units per second and cost."""
    points = []
    for c in status.get("cells") or []:
        if not isinstance(c, dict):
            continue
        x, y = _number(c.get("unitsPerSecond")), _number(c.get("costUSD"))
        if x is not None and y is not None:
            points.append((c, x, y))
    return points


def sweep_chart(status: dict[str, Any]) -> tuple[Safe, int]:
    """The scatter chart and how many cells it leaves out (no cost or no throughput)."""
    cells = [c for c in status.get("cells") or [] if isinstance(c, dict)]
    best = status.get("best") or {}
    points = plotted(status)
    if not points:
        return Safe(""), len(cells)
    w, h, left, right, top, bottom = 720, 340, 84, 24, 16, 48
    max_x, x_ticks = _axis(max(p[1] for p in points) * 1.05)
    max_y, y_ticks = _axis(max(p[2] for p in points) * 1.05)

    def sx(v: float) -> float:
        return round(left + v / max_x * (w - left - right), 1)

    def sy(v: float) -> float:
        return round(h - bottom - v / max_y * (h - top - bottom), 1)

    parts = [tag("line", x1=left, y1=h - bottom, x2=w - right, y2=h - bottom, class_="axis"),
             tag("line", x1=left, y1=top, x2=left, y2=h - bottom, class_="axis")]
    for t in x_ticks:
        parts.append(tag("text", tick_text(t, x_ticks[1]), x=sx(t), y=h - bottom + 16,
                         class_="tick", text_anchor="middle"))
    for t in y_ticks:
        parts.append(tag("text", "$" + tick_text(t, y_ticks[1]), x=left - 6, y=sy(t) + 4,
                         class_="tick", text_anchor="end"))
    parts.append(tag("text", "units per second", x=(left + w - right) / 2, y=h - 6,
                     class_="axis-label", text_anchor="middle"))
    parts.append(tag("text", "cost (USD)", x=14, y=(top + h - bottom) / 2, class_="axis-label",
                     text_anchor="middle", transform=f"rotate(-90 14 {(top + h - bottom) / 2})"))
    for c, x, y in points:
        marks = []
        if c.get("index") == best.get("byCost"):
            marks.append("best-cost")
        if c.get("index") == best.get("byThroughput"):
            marks.append("best-throughput")
        label = f"cell {c.get('index')}: {_fmt(x)} units/s, {money(c.get('costUSD'))}"
        if marks:
            label += " (" + ", ".join(m.replace("-", " by ") for m in marks) + ")"
        parts.append(tag(
            "g",
            tag("circle", tag("title", label), cx=sx(x), cy=sy(y), r=7 if marks else 5,
                class_=" ".join(["point", phase_slug(c.get("phase")), *marks]),
                data_cell=c.get("index")),
            tag("text", c.get("index"), x=sx(x) + 9, y=sy(y) - 7, class_="point-label")))
    # As wide as its container: the viewBox scales, the height follows from its ratio.
    svg = tag("svg", *parts, xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {w} {h}",
              width="100%", preserveAspectRatio="xMidYMid meet", class_="sweep-chart",
              role="img",
              aria_label="cost against units per second")
    return svg, len(cells) - len(points)
