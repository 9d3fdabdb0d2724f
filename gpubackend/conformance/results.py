"""The result model: checks, per-case results, and a whole run's report."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "pass"
FAIL = "fail"
UNSUPPORTED = "unsupported"
OBJECT_MODE = "object-mode"
CRASH = "crash"
"""The process running the case died (an abort, a segfault): a failure, with the tail of its log."""
STATUSES = (PASS, FAIL, UNSUPPORTED, OBJECT_MODE, CRASH)
FAILING = (FAIL, CRASH)


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    host_reads: int | None = None  # the `resident` check's explicit device-to-host reads per call


@dataclass
class CaseResult:
    case: str
    family: str
    backend: str
    device: str
    status: str
    checks: list[CheckResult] = field(default_factory=list)
    detail: str = ""
    runner: str = ""
    batch_axes: tuple[int | None, ...] | None = None
    seconds: float = 0.0
    log_tail: str = ""
    """The last lines of the worker's log, for a `crash`."""

    @property
    def column(self) -> str:
        """The matrix column: runner label (when set), backend and device."""
        prefix = f"{self.runner} " if self.runner else ""
        return f"{prefix}{self.backend} @ {self.device}"

    @property
    def host_reads_per_call(self) -> int | None:
        """Explicit device-to-host reads per warm call, where the case was measured (JAX
        backends)."""
        return next(
            (check.host_reads for check in self.checks if check.host_reads is not None), None
        )

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.ok]

    def summary_line(self) -> str:
        """One line: why the case is not passing (the status detail, then failing checks)."""
        problems = [
            f"{check.name}: {check.detail}"
            for check in self.failed_checks
            if check.detail not in self.detail
        ]
        return "; ".join(filter(None, [self.detail, *problems])) or "all checks ok"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseResult:
        checks = [CheckResult(**check) for check in data.get("checks", [])]
        fields = {
            key: value
            for key, value in data.items()
            if key in cls.__dataclass_fields__ and key != "checks"
        }
        if fields.get("batch_axes") is not None:
            fields["batch_axes"] = tuple(fields["batch_axes"])
        return cls(checks=checks, **fields)


@dataclass
class Report:
    environment: dict[str, Any]
    results: list[CaseResult] = field(default_factory=list)
    interrupted: bool = False
    """Stopped by Ctrl-C before every result finished: incomplete, so never a pass, whatever the
    results that finished say."""
    planned: int | None = None
    """The results the run set out to produce (cases × columns); None: as many as it holds."""

    @property
    def expected(self) -> int:
        return len(self.results) if self.planned is None else self.planned

    def summary(self) -> dict[str, Any]:
        per_column: dict[str, Counter] = {}
        for result in self.results:
            per_column.setdefault(result.column, Counter())[result.status] += 1
        totals = Counter(result.status for result in self.results)
        return {
            "interrupted": self.interrupted,
            "finished": len(self.results),
            "planned": self.expected,
            "total": {status: totals.get(status, 0) for status in STATUSES},
            "per_column": {
                column: {status: counts.get(status, 0) for status in STATUSES}
                for column, counts in per_column.items()
            },
        }

    def interruption(self) -> str:
        """ "Interrupted: N of M case results finished" for an interrupted report, else ""."""
        if not self.interrupted:
            return ""
        return f"Interrupted: {len(self.results)} of {self.expected} case results finished"

    def summary_line(self) -> str:
        parts = []
        for column, counts in self.summary()["per_column"].items():
            parts.append(f"{column}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES))
        return " | ".join(parts)

    @property
    def failed(self) -> bool:
        return any(result.status in FAILING for result in self.results)

    def columns(self) -> list[str]:
        return list(dict.fromkeys(result.column for result in self.results))

    def cases(self) -> list[str]:
        return list(dict.fromkeys(result.case for result in self.results))

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "interrupted": self.interrupted,
            "planned": self.expected,
            "summary": self.summary(),
            "results": [asdict(result) for result in self.results],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        # Reports from before interruptions were recorded are complete runs.
        return cls(
            data["environment"],
            [CaseResult.from_json(result) for result in data["results"]],
            interrupted=bool(data.get("interrupted", False)),
            planned=data.get("planned"),
        )
