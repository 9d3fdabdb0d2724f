"""One source for scipy's optimize methods, options and defaults, shared by the JAX and Numba
lowerings.

PyTensor's optimize ops (`MinimizeOp`, `RootOp`, `MinimizeScalarOp`,
`RootScalarOp`) name a scipy method and carry scipy keyword arguments.
`resolve` reads them once into a typed settings object (`settings`), with
scipy's option names, defaults and ``tol`` aliases; `budgets` holds scipy's
size-dependent budgets. Each backend then maps the settings onto its own
solvers and says which options it honours, so every option, ``maxiter``
included, means the same under JAX and under Numba. Imports neither jax nor
numba.
"""

from gpubackend.scipy_options.budgets import minimize_maxiter, minpack_maxfev, nonlin_maxiter
from gpubackend.scipy_options.methods import OP_OPTIONS, OpOptions, ScipyMethod
from gpubackend.scipy_options.resolve import (
    ResolvedOptions,
    op_options,
    refuse_before_scipy,
    resolve,
    scipy_method,
)

__all__ = [
    "OP_OPTIONS",
    "OpOptions",
    "ResolvedOptions",
    "ScipyMethod",
    "minimize_maxiter",
    "minpack_maxfev",
    "nonlin_maxiter",
    "op_options",
    "refuse_before_scipy",
    "resolve",
    "scipy_method",
]
