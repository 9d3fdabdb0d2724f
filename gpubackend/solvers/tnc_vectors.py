"""The vector steps TNC (`gpubackend.solvers.tnc`) repeats, as ``tnc.c`` writes them.

TNC works on scaled variables ``(x - xoffset) / xscale`` and a scaled objective
``fscale * f``; the objective is called at the unscaled point, clipped into the
bounds. Each helper keeps ``tnc.c``'s order of operations, so the trial points
are scipy's to the last bit.

So TNC compiles without PyTensor's fastmath flags (`gpubackend.solvers.ieee`).
"""

import numpy as np

from gpubackend.solvers.ieee import ieee_njit


@ieee_njit(inline="always")
def scaled_norm(v) -> float:
    """``tnc.c``'s ``dnrm21``: the Euclidean norm summed relative to the largest entry so far."""
    scale, ssq = 0.0, 1.0
    for i in range(v.shape[0]):
        if v[i] != 0.0:
            magnitude = abs(v[i])
            if scale < magnitude:
                ratio = scale / magnitude
                ssq = 1.0 + ssq * ratio * ratio
                scale = magnitude
            else:
                ratio = magnitude / scale
                ssq += ratio * ratio
    return scale * np.sqrt(ssq)


@ieee_njit(inline="always")
def project(v, pivot):
    """Zero the entries of the variables held at a bound (``pivot != 0``)."""
    for i in range(v.shape[0]):
        if pivot[i] != 0:
            v[i] = 0.0


@ieee_njit(inline="always")
def projected_norm(v, pivot, work) -> float:
    """The norm of ``v`` over the free variables (``work`` receives the projected copy)."""
    work[:] = v
    project(work, pivot)
    return scaled_norm(work)


@ieee_njit(inline="always")
def scale_gradient_into(out, gradient, xscale, fscale):
    """``out`` = the gradient in scaled variables and objective (``tnc.c``'s ``scaleg``)."""
    for i in range(out.shape[0]):
        out[i] = gradient[i] * (xscale[i] * fscale)


@ieee_njit(inline="always")
def scaled_slope(gradient, direction, xscale, fscale) -> float:
    """The scaled gradient's product with ``direction``, without a work vector."""
    total = 0.0
    for i in range(direction.shape[0]):
        total += direction[i] * (gradient[i] * (xscale[i] * fscale))
    return total


@ieee_njit(inline="always")
def unscaled_point_into(out, x, step, direction, xscale, xoffset, low, up):
    """``out`` = ``x + step * direction`` unscaled and clipped into the bounds: where TNC calls
    the objective."""
    for i in range(out.shape[0]):
        value = (x[i] + step * direction[i]) * xscale[i] + xoffset[i]
        if value < low[i]:
            value = low[i]
        elif value > up[i]:
            value = up[i]
        out[i] = value
