"""scipy's Anderson mixing (``root(method="anderson")``) as an `InverseJacobian` for the optimistix
`NonlinSolve`: the iteration of the Numba solver in `gpubackend.solvers.anderson`, whose docstring
describes it.

The history is held in ``M`` rows of which the first ``kept`` are in use; the
small system is solved at its full size ``M`` with the unused rows and
columns those of the identity, which leaves the used block's solution, and
its singularity, as they are. Where scipy raises on a non-finite system
(``ValueError``) the step here is NaN, and the solve ends unsuccessfully.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.nonlin_solve import InverseJacobian, initial_alpha


class MixingHistory(eqx.Module):
    """The first ``kept`` rows of ``dxs`` and ``dfs``: the last steps and residual changes,
    oldest first."""

    alpha: jax.Array
    dxs: jax.Array
    dfs: jax.Array
    kept: jax.Array


def solve_mixing(a, rhs):
    """``(gamma, solved)`` with ``A gamma = rhs``, as scipy's ``solve`` detects ``A``: a diagonal
    one by division, else Cholesky, else LU; ``solved`` is False where ``A`` is exactly singular
    (a zero pivot, scipy's ``LinAlgError``)."""
    diagonal = jnp.diag(a)
    is_diagonal = jnp.all((a == 0) | jnp.eye(a.shape[0], dtype=bool))
    by_division = rhs / jnp.where(diagonal != 0, diagonal, 1.0)
    factor = jnp.linalg.cholesky(a)
    positive_definite = jnp.all(jnp.isfinite(factor))
    by_cholesky = jax.scipy.linalg.cho_solve((factor, True), rhs)
    lu_and_pivots = jax.scipy.linalg.lu_factor(a)
    by_lu = jax.scipy.linalg.lu_solve(lu_and_pivots, rhs)
    lu_regular = jnp.all(jnp.diag(lu_and_pivots[0]) != 0)
    gamma = jnp.where(is_diagonal, by_division, jnp.where(positive_definite, by_cholesky, by_lu))
    solved = jnp.where(is_diagonal, jnp.all(diagonal != 0), positive_definite | lu_regular)
    return gamma, solved


class Anderson(InverseJacobian):
    alpha: float
    """NaN: scipy's ``None`` (scaled from ``x0`` and ``F(x0)``)."""
    w0: float
    M: int = eqx.field(static=True)

    def init(self, x, f) -> MixingHistory:
        history = jnp.zeros((self.M, x.shape[0]), x.dtype)
        return MixingHistory(initial_alpha(self.alpha, x, f), history, history, jnp.array(0))

    def inverse_times(self, history: MixingHistory, f, tol):
        """scipy's ``Anderson.solve``: where the system is singular the history is dropped."""
        step = -history.alpha * f
        if self.M == 0:
            return history, step
        used = jnp.arange(self.M) < history.kept
        dxs = jnp.where(used[:, None], history.dxs, 0.0)
        dfs = jnp.where(used[:, None], history.dfs, 0.0)
        gram = (dfs @ dfs.T) * jnp.where(jnp.eye(self.M, dtype=bool), 1.0 + self.w0**2, 1.0)
        a = jnp.where(used[:, None] & used[None, :], gram, jnp.eye(self.M, dtype=f.dtype))
        gamma, solved = solve_mixing(a, dfs @ f)
        mixed = step + gamma @ (dxs + history.alpha * dfs)
        any_used = history.kept > 0
        dropped = MixingHistory(
            history.alpha, history.dxs, history.dfs, jnp.where(solved, history.kept, 0)
        )
        return dropped, jnp.where(any_used & solved, mixed, step)

    def update(self, history: MixingHistory, x, f, x_previous, f_previous) -> MixingHistory:
        """scipy's ``Anderson._update``: keep the newest ``M`` pairs."""
        if self.M == 0:
            return history
        full = history.kept == self.M
        # Full, the oldest pair leaves: shift up one row, the newest goes last.
        dxs = jnp.where(full, jnp.roll(history.dxs, -1, axis=0), history.dxs)
        dfs = jnp.where(full, jnp.roll(history.dfs, -1, axis=0), history.dfs)
        row = jnp.where(full, self.M - 1, history.kept)
        return MixingHistory(
            history.alpha,
            dxs.at[row].set(x - x_previous),
            dfs.at[row].set(f - f_previous),
            jnp.minimum(history.kept + 1, self.M),
        )
