"""Shared timing helpers for the benchmark scripts: medians of per-call times."""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.table import Table


def median_seconds(call: Callable[[], object], *, number: int, repeat: int) -> float:
    """Median over ``repeat`` runs of the mean time of ``number`` back-to-back calls."""
    call()
    return statistics.median(t / number for t in timeit.repeat(call, number=number, repeat=repeat))


def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def print_ratio_table(
    title: str,
    rows: Sequence[tuple[str, float, float, str]],
    columns=("case", "ours", "baseline", "ratio", "goal"),
) -> None:
    """Rows are (label, ours_seconds, baseline_seconds, goal_text); ratio = ours / baseline."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for label, ours, baseline, goal in rows:
        table.add_row(
            label, format_seconds(ours), format_seconds(baseline), f"{ours / baseline:.2f}x", goal
        )
    Console(width=160).print(table)


def interleaved_medians(
    calls: dict[str, Callable[[], object]], *, number: int, repeat: int
) -> dict[str, float]:
    """Per-call medians of several variants, timed in turn within each of ``repeat`` rounds.

    Each round times ``number`` back-to-back calls of every variant, one after
    the other, so that a neighbour's load on a shared machine falls on all of
    them alike; the result is the median over the rounds of each variant's mean.
    """
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(repeat):
        for label, call in calls.items():
            times[label].append(timeit.timeit(call, number=number) / number)
    return {label: statistics.median(values) for label, values in times.items()}
