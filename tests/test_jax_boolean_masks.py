"""Writes through a boolean mask from the data (`gpubackend.dispatch.jax.boolean_masks`): exact
where their shape does not depend on the mask, refused by name where a selection's length
reaches anything else."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from gpubackend import DataDependentLengthError
from tests.jax_lowering_harness import JAX_MODES, assert_matches_reference

RNG = np.random.default_rng(20261126)
X, Y = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3))


def _writes():
    """(name, build(x, y) -> output): each writes through ``mask``, computed from the data."""

    def mask_of(x):
        return x[:, 0] > 0

    return {
        "set y[mask]": lambda x, y: pt.set_subtensor(x[mask_of(x)], y[mask_of(x)]),
        "inc y[mask]": lambda x, y: pt.inc_subtensor(x[mask_of(x)], y[mask_of(x)]),
        "set from two reads": lambda x, y: pt.set_subtensor(
            x[mask_of(x)], pt.exp(y[mask_of(x)]) * 2 + x[mask_of(x)]
        ),
        "set a row": lambda x, y: pt.set_subtensor(x[mask_of(x)], y[0]),
        "inc a row": lambda x, y: pt.inc_subtensor(x[mask_of(x)], y[0]),
        "set with an entrywise 2-d mask": lambda x, y: pt.set_subtensor(x[x > y], y[x > y] - 1),
        "two writes, one read": lambda x, y: (
            pt.set_subtensor(x[mask_of(x)], y[mask_of(x)])
            + pt.inc_subtensor(y[mask_of(x)], y[mask_of(x)])
        ),
    }


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize("name", sorted(_writes()))
def test_a_write_through_a_mask_from_the_data_is_exact(name, mode):
    x, y = pt.matrix("x"), pt.matrix("y")
    out = _writes()[name](x, y)
    result = assert_matches_reference([x, y], [out], [X, Y], mode, rtol=1e-15)
    # The mask selects some rows and not others, so a wrong rule would show.
    assert 0 < (X[:, 0] > 0).sum() < len(X)
    assert not np.allclose(np.asarray(result[0]), X)


def _refused():
    def mask_of(x):
        return x > 0

    return {
        "the selection itself": lambda x, y: [x[mask_of(x)]],
        # Passed through whole, the read would give the cumulative sum of all of y.
        "a read with another client": lambda x, y: [
            pt.set_subtensor(x[mask_of(x)], y[mask_of(x)]),
            y[mask_of(x)].cumsum(),
        ],
        "a value along the selection": lambda x, y: [
            pt.set_subtensor(x[mask_of(x)], y[mask_of(x)].cumsum())
        ],
    }


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize("name", sorted(_refused()))
def test_a_selection_of_data_dependent_length_is_still_refused(name, mode):
    x, y = pt.vector("x"), pt.vector("y")
    fn = pytensor.function([x, y], _refused()[name](x, y), mode=mode, on_unused_input="ignore")
    with pytest.raises(DataDependentLengthError, match="boolean mask known only at run time"):
        fn(X[:, 0], Y[:, 0])
