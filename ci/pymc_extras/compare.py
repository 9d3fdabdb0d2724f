"""Compare pymc-extras' test results without and with gpubackend, from pytest's JUnit XML files.

The leg runs the same tests four ways: stock and with the plugin (`import gpubackend` first), each
in PyTensor's default mode and with PYTENSOR_FLAGS=mode=JAX. This module reads the four reports
(named `<way>.xml` in one directory, the ways being `WAYS` below) and

- prints a table of outcomes per way;
- lists every *regression*: a test that passes stock and fails (or errors) with the plugin in the
  same mode. Any regression fails the leg: importing gpubackend must never break what worked;
- checks the *fixes* recorded in `plugin_fixes.txt` (tests that fail stock and pass with the
  plugin). A recorded fix that now fails with the plugin fails the leg too: it is something that
  worked with gpubackend and no longer does. A recorded fix that stock now passes as well, and a
  new fix not yet recorded, are only reported; `--update-fixes` rewrites the file from the run.

Only tests present in both reports of a mode are compared, so a run of a selection checks the
recorded fixes that it ran and says how many it did not.

    python ci/pymc_extras/compare.py REPORT_DIR [--fixes FILE] [--update-fixes]

Exit status: 0 when there is no regression and no lost fix, 1 otherwise, 2 when a report is
missing or unreadable.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

MODES = ("default", "jax")
WAYS = ("stock-default", "plugin-default", "stock-jax", "plugin-jax")
OUTCOMES = ("passed", "failed", "error", "skipped")
DEFAULT_FIXES_FILE = Path(__file__).with_name("plugin_fixes.txt")


@dataclass(frozen=True)
class TestResult:
    outcome: str  # one of OUTCOMES
    message: str  # the first line of the failure's or error's message; empty when it passed


def node_id(classname: str, name: str) -> str:
    """A JUnit case's pytest node id: `tests.a.test_b.TestC`, `t` -> `tests/a/test_b.py::TestC::t`.

    pytest's default `python_files` pattern makes every test module `test_*.py` or `*_test.py`;
    what follows the module in the dotted class name are test classes.
    """
    parts = classname.split(".")
    module_index = max(
        (i for i, part in enumerate(parts) if part.startswith("test_") or part.endswith("_test")),
        default=None,
    )
    if module_index is None:
        return f"{classname}::{name}"
    module_path = "/".join(parts[: module_index + 1]) + ".py"
    return "::".join([module_path, *parts[module_index + 1 :], name])


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:300] if lines else ""


def read_report(path: Path) -> dict[str, TestResult]:
    """Every test case of one JUnit XML report, by node id.

    A case with a <failure> or <error> counts as failed or error (an error in teardown of a passed
    test is an error); <skipped> covers skips and xfails (pytest writes an xfail as skipped).
    """
    results: dict[str, TestResult] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test = node_id(case.get("classname", ""), case.get("name", ""))
        failure, error = case.find("failure"), case.find("error")
        if error is not None:
            results[test] = TestResult("error", first_line(error.get("message") or error.text))
        elif failure is not None:
            results[test] = TestResult("failed", first_line(failure.get("message") or failure.text))
        elif case.find("skipped") is not None:
            results[test] = TestResult("skipped", "")
        else:
            results[test] = TestResult("passed", "")
    return results


def did_not_pass(result: TestResult | None) -> bool:
    return result is not None and result.outcome in ("failed", "error")


def read_fixes(path: Path) -> set[tuple[str, str]]:
    """The recorded fixes: lines `MODE NODE_ID`; lines starting with `#` are comments."""
    fixes: set[tuple[str, str]] = set()
    if not path.exists():
        return fixes
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            mode, test = line.split(maxsplit=1)
            fixes.add((mode, test))
    return fixes


def write_fixes(path: Path, fixes: set[tuple[str, str]]) -> None:
    header = [
        "# Tests of pymc-extras that fail stock and pass with gpubackend imported first, per mode",
        "# (default, or jax: PYTENSOR_FLAGS=mode=JAX). ci/pymc_extras/run.sh checks them: one that",
        "# fails with the plugin again fails the leg. Rewritten by run.sh --full --update-fixes.",
    ]
    body = [f"{mode} {test}" for mode, test in sorted(fixes)]
    path.write_text("\n".join(header + body) + "\n")


def print_table(reports: dict[str, dict[str, TestResult]]) -> None:
    print(f"{'way':<16}" + "".join(f"{outcome:>9}" for outcome in OUTCOMES) + f"{'total':>9}")
    for way, results in reports.items():
        counts = Counter(result.outcome for result in results.values())
        row = "".join(f"{counts[outcome]:>9}" for outcome in OUTCOMES)
        print(f"{way:<16}{row}{len(results):>9}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report_dir", type=Path, help="holds stock-default.xml, ... plugin-jax.xml")
    parser.add_argument("--fixes", type=Path, default=DEFAULT_FIXES_FILE)
    parser.add_argument(
        "--update-fixes",
        action="store_true",
        help="rewrite the fixes file: the fixes of the tests this run ran replace their entries",
    )
    args = parser.parse_args(argv)

    reports: dict[str, dict[str, TestResult]] = {}
    for way in WAYS:
        path = args.report_dir / f"{way}.xml"
        try:
            reports[way] = read_report(path)
        except (OSError, ET.ParseError) as exc:
            print(f"compare: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    print_table(reports)

    recorded_fixes = read_fixes(args.fixes)
    regressions: list[str] = []
    lost_fixes: list[str] = []
    new_fixes: set[tuple[str, str]] = set()
    fixes_now_stock_passes: list[str] = []
    observed_fixes: set[tuple[str, str]] = set()
    ran: set[tuple[str, str]] = set()
    for mode in MODES:
        stock, plugin = reports[f"stock-{mode}"], reports[f"plugin-{mode}"]
        for test in sorted(stock.keys() & plugin.keys()):
            ran.add((mode, test))
            stock_result, plugin_result = stock[test], plugin[test]
            if stock_result.outcome == "passed" and did_not_pass(plugin_result):
                regressions.append(f"{mode:<8}{test}\n          {plugin_result.message}")
            if did_not_pass(stock_result) and plugin_result.outcome == "passed":
                observed_fixes.add((mode, test))
                if (mode, test) not in recorded_fixes:
                    new_fixes.add((mode, test))
            if (mode, test) in recorded_fixes:
                if did_not_pass(plugin_result):
                    lost_fixes.append(f"{mode:<8}{test}\n          {plugin_result.message}")
                elif stock_result.outcome == "passed":
                    fixes_now_stock_passes.append(f"{mode:<8}{test}")

    fixes_checked = len(recorded_fixes & ran)
    print(
        f"\nplugin fixes: {len(observed_fixes)} tests fail stock and pass with the plugin "
        + ", ".join(f"{sum(m == mode for m, _ in observed_fixes)} {mode}" for mode in MODES)
        + f"; {fixes_checked} of the {len(recorded_fixes)} recorded were run"
    )
    sections = [
        ("REGRESSIONS (pass stock, fail with the plugin)", regressions),
        ("LOST FIXES (recorded as fixed by the plugin, fail with it now)", lost_fixes),
        ("recorded fixes that stock passes too now (not a failure)", fixes_now_stock_passes),
        (
            "new fixes, not recorded in " + args.fixes.name + " (not a failure)",
            [f"{mode:<8}{test}" for mode, test in sorted(new_fixes)],
        ),
    ]
    for title, entries in sections:
        if entries:
            print(f"\n{title}: {len(entries)}")
            print("\n".join(f"  {entry}" for entry in entries))

    if args.update_fixes:
        kept = {fix for fix in recorded_fixes if fix not in ran}
        write_fixes(args.fixes, kept | observed_fixes)
        print(f"\nwrote {args.fixes}: {len(kept | observed_fixes)} fixes")

    if regressions or lost_fixes:
        print(f"\nFAIL: {len(regressions)} regressions, {len(lost_fixes)} lost fixes")
        return 1
    print("\nOK: no test that passes stock fails with the plugin; no recorded fix is lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
