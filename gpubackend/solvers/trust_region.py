"""The scaling and trust region MINPACK's root finders (``hybrj``, ``lmder``) start from."""

from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import norm


@numba_njit
def initial_scaling(column_norms, x, factor, diag):
    """``diag`` becomes the first Jacobian's column norms (1 for a zero column); returns
    ``(xnorm, delta)``: the scaled start's norm and the first trust region, ``factor`` times it."""
    for j in range(diag.shape[0]):
        diag[j] = column_norms[j] if column_norms[j] != 0.0 else 1.0
    xnorm = norm(diag * x)
    return xnorm, factor * xnorm if xnorm != 0.0 else factor
