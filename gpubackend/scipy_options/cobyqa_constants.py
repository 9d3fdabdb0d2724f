"""scipy's vendored COBYQA: its exit statuses, default constants and default budgets, which the
NUMBA solver (`gpubackend.solvers.cobyqa`) and the JAX one (`gpubackend.dispatch.jax.cobyqa`)
both follow."""

import math

# scipy's exit statuses (cobyqa.settings.ExitStatus).
RADIUS_SUCCESS = 0
TARGET_SUCCESS = 1
MAX_EVAL_WARNING = 5
MAX_ITER_WARNING = 6
INFEASIBLE_ERROR = -1
LINALG_ERROR = -2

# COBYQA's default constants (cobyqa.settings.DEFAULT_CONSTANTS).
DECREASE_RADIUS_FACTOR = 0.5
INCREASE_RADIUS_FACTOR = math.sqrt(2.0)
INCREASE_RADIUS_THRESHOLD = 2.0
DECREASE_RADIUS_THRESHOLD = 1.4
DECREASE_RESOLUTION_FACTOR = 0.1
LARGE_RESOLUTION_THRESHOLD = 250.0
MODERATE_RESOLUTION_THRESHOLD = 16.0
LOW_RATIO = 0.1
HIGH_RATIO = 0.7
VERY_LOW_RATIO = 0.01
SHORT_STEP_THRESHOLD = 0.5
LOW_RADIUS_FACTOR = 0.1
LARGE_SHIFT_FACTOR = 10.0
LARGE_GRADIENT_FACTOR = 10.0
RESOLUTION_FACTOR = 2.0

PER_VARIABLE_EVALUATIONS = 500
PER_VARIABLE_ITERATIONS = 1000
"""scipy's default ``maxfev`` and ``maxiter``: ``500 * len(x0)`` and ``1000 * len(x0)``."""
