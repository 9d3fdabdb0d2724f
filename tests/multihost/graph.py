"""The graph both multi-host processes and the single-process reference compile."""

import numpy as np
import pytensor
import pytensor.tensor as pt


def example_graph():
    x = pt.matrix("x")
    w = pytensor.shared(np.linspace(-1.0, 1.0, 3), name="w")
    rowwise = pt.tanh(x @ w)
    return [x], [rowwise, (rowwise**2).sum() + x.mean()]


def example_inputs():
    return [np.random.default_rng(42).normal(size=(8, 3))]
