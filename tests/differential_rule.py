"""What the differential tests (while-Scan, index) share: the JAX paths and device they run on,
the verdicts the rule accepts, the quick hypothesis budget and the assertion of the rule."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

from gpubackend.conformance.differential import (
    CHECKED,
    NOT_APPLICABLE,
    PASS,
    REFUSED,
    UPSTREAM,
    ReferenceObservation,
    Verdict,
)
from gpubackend.devices import DEVICE_ENV_VAR

JAX_DEVICE = os.environ.get(DEVICE_ENV_VAR, "cpu:1")
JAX_PATHS = ("jax", "jax-registered", "jaxified")
"""mode="JAX_GPU", stock mode="JAX" with gpubackend's registrations, jax.jit of PyMC's
get_jaxified_graph."""
ACCEPTED = (PASS, CHECKED, REFUSED, UPSTREAM, NOT_APPLICABLE)

# Shrinking would re-run failing graphs many times over: a failure is reported as drawn.
QUICK = settings(
    deadline=None,
    database=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)


def assert_rule(spec: str, oracles: ReferenceObservation, verdicts: dict[str, Verdict]) -> None:
    """The spec (``spec`` describes it) has a reference, and every verdict is `ACCEPTED`."""
    assert not oracles.invalid, f"{spec}: {oracles.invalid}"
    failing = {
        column: verdict for column, verdict in verdicts.items() if verdict.status not in ACCEPTED
    }
    assert not failing, f"{spec}:\n" + "\n".join(
        f"{column}: {verdict.status}: {verdict.detail}" for column, verdict in failing.items()
    )
