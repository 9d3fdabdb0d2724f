"""Log-log line plots as SVG text, written by hand: the benchmarks need no plotting library."""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape

# Tableau's ten colours, one per line in order.
COLOURS = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
PANEL_WIDTH, PANEL_HEIGHT, MARGIN, LEGEND_WIDTH = 360, 260, 60, 220


def _decades(values: list[float]) -> tuple[int, int]:
    low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    return low, max(high, low + 1)


def _placement(
    left: float, top: float, x_decades: tuple[int, int], y_decades: tuple[int, int]
) -> Callable[[float, float], tuple[float, float]]:
    """Where a data point lies in the panel whose top left corner is (left, top)."""

    def at(x: float, y: float) -> tuple[float, float]:
        fx = (math.log10(x) - x_decades[0]) / (x_decades[1] - x_decades[0])
        fy = (math.log10(y) - y_decades[0]) / (y_decades[1] - y_decades[0])
        return left + fx * PANEL_WIDTH, top + (1 - fy) * PANEL_HEIGHT

    return at


def log_log_panels(
    panels: dict[str, dict[str, list[tuple[float, float]]]], *, title: str, y_label: str
) -> str:
    """One panel per title, side by side, each with one line per label through its (x, y) points
    (log-log axes, a tick per decade), and one legend of every label."""
    labels = list(dict.fromkeys(label for lines in panels.values() for label in lines))
    colour = {label: COLOURS[i % len(COLOURS)] for i, label in enumerate(labels)}
    width = MARGIN + len(panels) * (PANEL_WIDTH + MARGIN) + LEGEND_WIDTH
    height = PANEL_HEIGHT + 2 * MARGIN + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{MARGIN}" y="20" font-size="13">{escape(title)}</text>',
    ]
    for index, (panel, lines) in enumerate(panels.items()):
        left, top = MARGIN + index * (PANEL_WIDTH + MARGIN), MARGIN
        points = [point for line in lines.values() for point in line]
        out.append(f'<text x="{left}" y="{top - 8}">{escape(panel)}</text>')
        out.append(
            f'<rect x="{left}" y="{top}" width="{PANEL_WIDTH}" height="{PANEL_HEIGHT}" '
            f'fill="none" stroke="#888"/>'
        )
        if not points:
            continue
        (x_low, x_high), (y_low, y_high) = (
            _decades([x for x, _ in points]),
            _decades([y for _, y in points]),
        )
        at = _placement(left, top, (x_low, x_high), (y_low, y_high))

        for decade in range(x_low, x_high + 1):
            x, _ = at(10.0**decade, 10.0**y_low)
            out.append(
                f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + PANEL_HEIGHT}" '
                f'stroke="#eee"/><text x="{x:.1f}" y="{top + PANEL_HEIGHT + 14}" '
                f'text-anchor="middle">1e{decade}</text>'
            )
        for decade in range(y_low, y_high + 1):
            _, y = at(10.0**x_low, 10.0**decade)
            out.append(
                f'<line x1="{left}" y1="{y:.1f}" x2="{left + PANEL_WIDTH}" y2="{y:.1f}" '
                f'stroke="#eee"/><text x="{left - 4}" y="{y + 4:.1f}" '
                f'text-anchor="end">1e{decade}</text>'
            )
        out.append(
            f'<text x="{left - 44}" y="{top + PANEL_HEIGHT / 2}" text-anchor="middle" '
            f'transform="rotate(-90 {left - 44} {top + PANEL_HEIGHT / 2})">{escape(y_label)}</text>'
        )
        for label, line in lines.items():
            drawn = [at(x, y) for x, y in sorted(line)]
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in drawn)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{colour[label]}" stroke-width="2"/>'
            )
            out += [
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour[label]}"/>'
                for x, y in drawn
            ]
    legend = MARGIN + len(panels) * (PANEL_WIDTH + MARGIN)
    for i, label in enumerate(labels):
        y = MARGIN + 10 + 18 * i
        out.append(
            f'<line x1="{legend}" y1="{y}" x2="{legend + 20}" y2="{y}" stroke="{colour[label]}" '
            f'stroke-width="2"/><text x="{legend + 26}" y="{y + 4}">{escape(label)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
