"""Specialising a jitted graph on the number of steps its while-Scans take.

PyTensor trims a while-Scan's trace to the steps actually taken, so its length
depends on the data, and ``jax.jit`` can only return shapes fixed at trace
time. A linker that owns the call (JAX_GPU) can still give the exact answer:

- the lowering of each top-level while-Scan whose trace PyTensor would trim
  reads an *assumed* step count at trace time (`WhileStepSpecialisation`; the
  declared maximum at first) and trims to it statically, and the graph also
  returns, per such Scan, the assumed and the actual count;
- `StepSpecialisedFunction` checks them after each call. On a mismatch it
  switches to (or compiles, once per distinct tuple of counts) the function
  specialised on the actual counts and runs it again, so a wrong-length answer
  is never returned. Repeated calls that stop after the same number of steps
  run once.

Stock ``mode="JAX"`` has no such linker, so there the lowering refuses these
outputs with `DataDependentLengthError` at compile time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pytensor.graph.basic import Apply
from pytensor.scan.op import Scan

WHILE_STEPS_KEY = "gpubackend_while_steps"


class WhileStepSpecialisation:
    """Step counts assumed for the while-Scans directly in one graph, read when it is traced."""

    def __init__(self, top_level_nodes: frozenset[Apply]):
        self.top_level_nodes = top_level_nodes
        self.assumed: dict[Apply, int] = {}
        self.observed_nodes: list[Apply] = []
        self._observed: list[tuple[int, Any]] = []

    @classmethod
    def of(cls, fgraph) -> WhileStepSpecialisation | None:
        while_scans = frozenset(
            node for node in fgraph.apply_nodes if isinstance(node.op, Scan) and node.op.info.as_while
        )
        return cls(while_scans) if while_scans else None

    def steps_to_assume(self, node: Apply, max_steps: int) -> int | None:
        """The static step count to trim ``node``'s traces to, or None if it cannot be specialised."""
        if node not in self.top_level_nodes:
            return None
        return self.assumed.get(node, max_steps)

    def observe(self, node: Apply, assumed: int, steps_taken) -> None:
        self.observed_nodes.append(node)
        self._observed.append((assumed, steps_taken))

    def returning_step_counts(self, graph_fn: Callable) -> Callable:
        def graph_and_step_counts(*args):
            self.observed_nodes.clear()
            self._observed.clear()
            outputs = graph_fn(*args)
            return outputs, tuple(self._observed)

        return graph_and_step_counts


class StepSpecialisedFunction:
    """Call the jitted graph specialised on the step counts that the data actually produce."""

    def __init__(self, specialisation: WhileStepSpecialisation, new_jit: Callable[[], Callable]):
        self._specialisation = specialisation
        self._new_jit = new_jit
        self._compiled: dict[frozenset, Callable] = {}
        self._current_key: frozenset = frozenset()

    def _run(self, key: frozenset, args) -> tuple[Any, dict[Apply, int], bool]:
        if key not in self._compiled:
            self._compiled[key] = self._new_jit()
        self._specialisation.assumed = dict(key)
        outputs, counts = self._compiled[key](*args)
        taken = {
            node: int(np.asarray(steps_taken))
            for node, (_, steps_taken) in zip(self._specialisation.observed_nodes, counts, strict=True)
        }
        matched = all(int(np.asarray(assumed)) == taken[node] for node, (assumed, _) in zip(self._specialisation.observed_nodes, counts, strict=True))
        return outputs, taken, matched

    def __call__(self, *args):
        outputs, taken, matched = self._run(self._current_key, args)
        if matched:
            return outputs
        self._current_key = frozenset(taken.items())
        outputs, _, matched = self._run(self._current_key, args)
        if not matched:
            raise RuntimeError("while-Scan step counts changed between two runs on the same inputs")
        return outputs
