"""A rich progress bar for the suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(total: int) -> Iterator[Callable[[str], None]]:
    """Yield ``advance(description)``: one more step done, ``description`` saying which. Safe from
    threads."""
    columns = (TextColumn("conformance"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TextColumn("{task.description}")) as progress:
        task = progress.add_task("starting", total=total)

        def advance(description: str) -> None:
            progress.update(task, advance=1, description=description)

        yield advance


def progress_display(enabled: bool, total: int) -> AbstractContextManager[Callable[[str], None]]:
    """`progress_bar` when enabled, else an ``advance`` that shows nothing."""
    return progress_bar(total) if enabled else nullcontext(lambda description: None)
