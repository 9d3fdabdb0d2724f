"""A rich progress bar for the suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(total: int) -> Iterator[Callable[[str], None]]:
    """Yield ``advance(description)``: mark the previous step done and show the next one."""
    columns = (TextColumn("conformance"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TextColumn("{task.description}")) as progress:
        task = progress.add_task("", total=total)
        started = False

        def advance(description: str) -> None:
            nonlocal started
            progress.update(task, advance=1 if started else 0, description=description)
            started = True

        yield advance
