"""One catalogue case per scipy method that gpubackend lowers on either backend.

The generated optimize graphs (`optimize_graphs`) draw options and inputs at
random and run on the host; these cases run in every conformance leg, on every
device, so each method's result, ``success`` and implicit gradient are checked
where the leg runs (a GPU runner too). Each is the method's first well-posed
input variant (free, loose bounds or a bracket) of the seed-0 problem at
``tol=1e-8`` (`STABLE_TOL` names the exceptions). A method only one backend
lowers shows as unsupported (JAX) or object mode (NUMBA) on the other, as it
should.
"""

from __future__ import annotations

from functools import partial

from gpubackend.conformance.catalogue import CaseGraph, register_case
from gpubackend.conformance.optimize_graphs import (
    BRACKETING_ROOT_SCALAR,
    SCALAR_KINDS,
    OptimizeSpec,
    build_optimize,
    input_variants,
    scipy_methods,
    table_method,
)

TOL = 1e-8
"""Tight enough that methods which take other paths to the solution (JAX's L-BFGS-B, trust-krylov's
exact subproblem) end within the case's tolerance of scipy's."""
STABLE_TOL = {"cg": 1e-7}
"""Methods whose own verdict at `TOL` hangs on rounding, and the tolerance where it does not:
scipy's CG on this case at 1e-8 stops on "precision loss" (success False) from 303 of 512
starts moved by 512 ulps, at the solution (so did JAX's CG with XLA's rounding on an AMD EPYC);
at 1e-7 from none of them, and every backend ends within 2e-9 of scipy."""
SIZE = 3


def method_spec(kind: str, method: str) -> OptimizeSpec:
    taken, _ = input_variants(kind, method)
    size = 1 if kind in SCALAR_KINDS else SIZE
    tol = STABLE_TOL.get(method.lower(), TOL)
    return OptimizeSpec(kind, method, size, seed=0, variant=taken[0], tol=tol, budget=None)


def build_method_case(kind: str, method: str) -> CaseGraph:
    return build_optimize(method_spec(kind, method))


def lowered_methods() -> list[tuple[str, str]]:
    """The (kind, method) pairs the method table gives a JAX lowering or a native Numba solver."""
    return [
        (kind, method)
        for kind, method in scipy_methods()
        if (entry := table_method(kind, method)) is not None
        and (entry.jax is not None or entry.numba is not None)
    ]


def host_reads(kind: str, method: str) -> int:
    """A bracketing root find reads its bracket's sign check back, to raise scipy's error
    (`while_scan.brackets`); nothing else reads."""
    return int(kind == "root_scalar" and method in BRACKETING_ROOT_SCALAR)


# A partial of a module-level function, not a closure: the conformance workers get cases pickled.
for _kind, _method in lowered_methods():
    register_case(
        "optimize-methods",
        name=f"{_kind}_{_method.replace('-', '_')}",
        host_reads=host_reads(_kind, _method),
    )(partial(build_method_case, _kind, _method))
