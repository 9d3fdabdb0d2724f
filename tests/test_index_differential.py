"""The index differential (issue 43): plain graphs indexing at literal positions, on every JAX path
and NUMBA, against numpy and FAST_COMPILE, error type included.

The rule is the while-Scan differential's (`gpubackend.conformance.differential.call_verdict`): a
mode returns the reference's values or raises its error type; where PyTensor itself is wrong
(`index_differential.UPSTREAM_BUGS`), doing what PyTensor does is not held against it.
"""

from __future__ import annotations

# The jaxified path's: importing PyMC raises the recursion limit, which hypothesis warns about
# during a test.
import pymc.sampling.jax  # noqa: F401
import pytest
from hypothesis import given, settings

from gpubackend.conformance.cli import main as conformance_main
from gpubackend.conformance.index_differential import check_index_in_process
from gpubackend.conformance.index_graphs import (
    OPERATIONS,
    POSITIONS,
    IndexSpec,
    draw_index_specs,
    index_specs,
)
from tests.differential_rule import JAX_DEVICE, JAX_PATHS, QUICK, assert_rule


def _assert_rule(spec: IndexSpec, modes: list[tuple[str, str]]) -> None:
    assert_rule(str(spec), *check_index_in_process(spec, modes))


@settings(QUICK, max_examples=8)
@given(index_specs())
def test_generated_index_graphs_on_every_jax_path(spec: IndexSpec) -> None:
    _assert_rule(spec, [(mode, JAX_DEVICE) for mode in JAX_PATHS])


@settings(QUICK, max_examples=2)
@given(index_specs())
def test_generated_index_graphs_on_numba(spec: IndexSpec) -> None:
    # Numba compiles each graph for a second or more: two graphs.
    _assert_rule(spec, [("numba", "cpu")])


def test_draws_cover_every_literal_operation_and_shape_reproducibly() -> None:
    specs = draw_index_specs(40)
    assert specs == draw_index_specs(40)
    assert len(set(specs)) == 40
    assert {spec.position for spec in specs} == set(POSITIONS)
    assert {spec.operation for spec in specs} == set(OPERATIONS)
    assert {spec.static for spec in specs} == {True, False}
    # A run-time length is also called on an empty array.
    assert all(0 in spec.lengths for spec in specs if not spec.static)


def test_a_negative_number_of_graphs_is_refused_by_name() -> None:
    with pytest.raises(
        ValueError, match=r"count=-1: expected a number of graphs to draw, 0 or more"
    ):
        draw_index_specs(-1)
    assert draw_index_specs(0) == []


# The graphs issue 43 reported, every one on each JAX path and NUMBA.
ISSUE_GRAPHS = {
    "x[3] of a length-3 vector": IndexSpec("read", "past the end", 3, 3, static=False),
    "x[-4] of a length-3 vector": IndexSpec("read", "negative past the start", -4, 3, static=False),
    "take(x, 9)": IndexSpec("take", "past the end", 9, 3, static=False),
    "set_subtensor(x[3], w)": IndexSpec("set", "past the end", 3, 3, static=True),
    "inc_subtensor(x[[1, -4]], w)": IndexSpec("inc", "array", (1, -4), 3, static=True),
    "x[[0, 5]] of a static length-3 vector": IndexSpec("read", "array", (0, 5), 3, static=True),
}


@pytest.mark.parametrize("name", sorted(ISSUE_GRAPHS))
def test_issue_graph_gives_the_references_value_or_error_on_every_jax_path(name: str) -> None:
    _assert_rule(ISSUE_GRAPHS[name], [(mode, JAX_DEVICE) for mode in JAX_PATHS])


def test_take_past_the_length_raises_the_references_error_on_numba() -> None:
    # Numba compiles each graph for a second or more: the one NUMBA read past the array.
    _assert_rule(ISSUE_GRAPHS["take(x, 9)"], [("numba", "cpu")])


@pytest.mark.parametrize("mode", JAX_PATHS)
def test_index_array_past_the_end_of_a_run_time_length(mode: str) -> None:
    # PyTensor's rewrites turn the literal index array into a slice checked by SpecifyShape. Before:
    # PyTensor's JAX lowering of SpecifyShape raised ValueError where FAST_COMPILE raises
    # AssertionError (`upstream`: numpy raises IndexError); now ShapeMismatchError, both.
    _assert_rule(IndexSpec("take", "array", (0,), 2, static=False), [(mode, JAX_DEVICE)])


def test_command_line_refuses_an_unknown_index_mode(tmp_path, capsys) -> None:
    arguments = ["--no-catalogue", "--generated-index", "1", "--index-modes", "jax-gpu"]
    with pytest.raises(SystemExit) as exit_info:
        conformance_main([*arguments, "--device", JAX_DEVICE, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--index-modes: invalid choice: 'jax-gpu'" in capsys.readouterr().err
