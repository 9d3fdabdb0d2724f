"""Sampling paths shared by the PyMC benchmarks: each a ``(build, sample)`` pair.

``build()`` compiles the path and runs anything that compiles on first use
(a two-draw warm-up run, or numpyro's kernels compiled ahead of time), so
that its time is the path's compile time; ``sample(built, seed)`` samples and
returns the posterior of the model's free variables (constrained, as
``pm.sample`` names them), whose time is the sampling time.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import arviz
import jax
import numpy as np
import pymc as pm
import xarray as xr
from pymc.sampling.jax import get_jaxified_graph, get_jaxified_logp

SamplingPath = tuple[Callable[[], object], Callable[[object, int], xr.Dataset]]
# The warm-up run in `build`: enough to call the logp and its gradient, which compiles what a JIT
# compiles on first call (XLA's executable behind a JAX mode, Numba's on first call).
WARM_UP = {"draws": 2, "tune": 2, "chains": 1}


def free_variable_names(model: pm.Model) -> list[str]:
    return [rv.name for rv in model.free_RVs]


def free_posterior(idata, model: pm.Model) -> xr.Dataset:
    """The free variables' draws from ``pm.sample``'s or nutpie's result (a DataTree)."""
    return idata.posterior.to_dataset()[free_variable_names(model)]


def failure_text(error: Exception) -> str:
    """Why a path failed: the error's type and the last line of its message naming an error (a
    JAX runtime error wraps the callback's traceback), else its first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
    named = [line for line in lines if re.match(r"\w*(Error|Exception)\b", line)]
    return f"fails: {type(error).__name__}: {(named or lines)[-1][:120]}"


def min_bulk_ess(posterior: xr.Dataset) -> float:
    ess = arviz.ess(posterior, method="bulk")
    return float(min(np.min(np.asarray(ess[name])) for name in ess.data_vars))


def pymc_nuts(model: pm.Model, mode: str, draws: int, chains: int) -> SamplingPath:
    """PyMC's own NUTS, its chains one after the other in this process, on ``mode``."""

    def run(step, seed, *, draws, tune, chains):
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            step=step,
            model=model,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
        return free_posterior(idata, model)

    def build():
        step = pm.NUTS(model=model, mode=mode)
        run(step, 0, **WARM_UP)
        return step

    return build, lambda step, seed: run(step, seed, draws=draws, tune=draws, chains=chains)


def nutpie_path(model: pm.Model, backend: str, draws: int, chains: int) -> SamplingPath:
    """nutpie on its ``"numba"`` or ``"jax"`` backend (JAX: the gradient by ``jax.grad``)."""
    import nutpie

    def run(compiled, seed, *, draws, tune, chains):
        idata = nutpie.sample(
            compiled, draws=draws, tune=tune, chains=chains, seed=seed, progress_bar=False
        )
        return free_posterior(idata, model)

    def build():
        compiled = nutpie.compile_pymc_model(
            model, backend=backend, gradient_backend="jax" if backend == "jax" else "pytensor"
        )
        run(compiled, 0, **WARM_UP)
        return compiled

    return build, lambda compiled, seed: run(compiled, seed, draws=draws, tune=draws, chains=chains)


def numpyro_nuts(
    model: pm.Model,
    draws: int,
    chains: int,
    device: jax.Device | None = None,
    parallel: bool = False,
) -> SamplingPath:
    """numpyro's NUTS kernel on the model's jaxified logp, warmup and draws in one compiled
    function: chains vectorized on ``device`` (default: JAX's default device), or with
    ``parallel`` one chain per local device (``jax.pmap``, numpyro's ``chain_method="parallel"``).

    numpyro's ``MCMC.run`` (and so ``pm.sample(nuts_sampler="numpyro")``)
    initialises the chains outside any jit: its step-size and adaptation setup
    traces and compiles afresh on every run, a fixed second or more that would
    count as sampling. Compiling numpyro's own ``init_kernel`` and
    ``sample_kernel`` together, ahead of time, makes that compile time. The
    draws are mapped to the free variables' constrained values in the same
    program, as ``pm.sample`` does after sampling.
    """
    from numpyro.infer.hmc import hmc

    devices = jax.local_devices()[:chains] if parallel else [device or jax.devices()[0]]
    point = model.initial_point()
    value_names = [v.name for v in model.value_vars]
    names = free_variable_names(model)
    by_name = {v.name: v for v in model.unobserved_value_vars}

    def arguments(seed):
        keys = jax.random.split(jax.random.PRNGKey(seed), chains)
        start = [np.repeat(np.asarray(point[name])[None], chains, axis=0) for name in value_names]
        if parallel:
            return keys, start
        return jax.device_put((keys, start), devices[0])

    def build():
        # numpyro's potential is -logp. PyMC's flag reads the other way round:
        # negative_logp=False negates (as pm.sample(nuts_sampler="numpyro") calls it).
        potential = get_jaxified_logp(model, negative_logp=False)
        constrained = get_jaxified_graph(
            inputs=model.value_vars, outputs=[by_name[name] for name in names]
        )
        init_kernel, sample_kernel = hmc(potential_fn=potential, algo="NUTS")

        def step(state, _):
            state = sample_kernel(state)
            return state, state.z

        def chain(rng_key, init_params):
            state = init_kernel(init_params, num_warmup=draws, rng_key=rng_key)
            state, _ = jax.lax.scan(step, state, None, length=draws)
            _, kept = jax.lax.scan(step, state, None, length=draws)
            return jax.vmap(constrained)(*kept)

        mapped = jax.pmap(chain, devices=devices) if parallel else jax.jit(jax.vmap(chain))
        return mapped.lower(*arguments(0)).compile()

    def sample(compiled, seed):
        draws_by_chain = jax.block_until_ready(compiled(*arguments(seed)))
        return arviz.convert_to_dataset(
            {name: np.asarray(value) for name, value in zip(names, draws_by_chain, strict=True)}
        )

    return build, sample
