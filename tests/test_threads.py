"""JAX_GPU functions called from several threads at once (issue 43, README "Calling a function from
several threads").

A call that updates a shared variable holds that variable's lock: every update lands, as in a
sequence of calls. The thread switch interval is made tiny so that, without the lock, two calls
read the same value before either writes its update back (PyTensor's ``Function`` is not
thread-safe: stock ``mode="JAX"`` and the reference lose updates the same way).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import gpubackend  # noqa: F401  (registers the mode)

N_THREADS = 4
N_CALLS = 200


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def run_in_threads(works: list[Callable[[], None]]) -> list[Exception]:
    """Run each work in its own thread; the exceptions they raised."""
    errors: list[Exception] = []

    def guarded(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as error:  # noqa: BLE001  (every error a thread raised fails the test)
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def repeated(call: Callable[[], object], times: int = N_CALLS) -> Callable[[], None]:
    def work() -> None:
        for _ in range(times):
            call()

    return work


def counter_reference(n_calls: int) -> float:
    """What ``n_calls`` calls of ``u <- u + 1`` leave in the reference, one after the other."""
    u = pytensor.shared(np.float64(0.0), name="u")
    step = pytensor.function([], [], updates={u: u + 1}, mode="FAST_COMPILE")
    for _ in range(n_calls):
        step()
    return float(u.get_value())


def test_updates_from_several_threads_all_land():
    u = pytensor.shared(np.float64(0.0), name="u")
    step = pytensor.function([], [], updates={u: u + 1}, mode="JAX_GPU")
    errors = run_in_threads([repeated(step)] * N_THREADS)
    assert errors == []
    assert float(np.asarray(u.get_value())) == counter_reference(N_THREADS * N_CALLS)


def test_functions_updating_one_variable_are_serialised_together():
    """The lock is the variable's: a copy of the function (which shares the variable's storage) and
    another function updating it wait for each other too."""
    u = pytensor.shared(np.float64(0.0), name="u")
    step = pytensor.function([], [], updates={u: u + 1}, mode="JAX_GPU")
    other = pytensor.function([], u, updates={u: u + 1}, mode="JAX_GPU")
    v = pytensor.shared(np.float64(0.0), name="v")
    both = pytensor.function([], [], updates={u: u + 1, v: v + 1}, mode="JAX_GPU")
    errors = run_in_threads(
        [repeated(step), repeated(step.copy()), repeated(other), repeated(both)]
    )
    assert errors == []
    assert float(np.asarray(u.get_value())) == counter_reference(N_THREADS * N_CALLS)
    assert float(np.asarray(v.get_value())) == counter_reference(N_CALLS)


def test_function_without_updates_takes_no_lock_and_each_thread_gets_its_inputs_result():
    x = pt.dvector("x")
    double = pytensor.function([x], x * 2, mode="JAX_GPU")
    reference = pytensor.function([x], x * 2, mode="FAST_COMPILE")
    assert double._serialised is None
    wrong: list[int] = []

    def work(k: int) -> Callable[[], None]:
        value = np.full(3, float(k))
        expected = reference(value)

        def call() -> None:
            if not np.array_equal(np.asarray(double(value)), expected):
                wrong.append(k)

        return repeated(call, 2 * N_CALLS)

    errors = run_in_threads([work(k) for k in range(N_THREADS)])
    assert errors == []
    assert wrong == []


def test_reading_a_variable_another_thread_updates_gives_a_value_it_held_or_jaxs_error():
    """Readers take no lock: an update donates the buffer a concurrent read may hold, and JAX then
    refuses the read (its error names the deleted buffer); a value returned is one the variable
    held."""
    size = 1000
    u = pytensor.shared(np.zeros(size), name="u")
    step = pytensor.function([], [], updates={u: u + 1}, mode="JAX_GPU")
    total = pytensor.function([], u.sum(), mode="JAX_GPU")
    totals: list[float] = []
    read_errors: list[str] = []

    def read() -> None:
        try:
            totals.append(float(total()))
        except (ValueError, RuntimeError) as error:  # JAX's, per the moment of the race
            read_errors.append(str(error))

    errors = run_in_threads([repeated(step), repeated(step), repeated(read), repeated(read)])
    assert errors == []
    assert float(np.asarray(u.get_value())[0]) == counter_reference(2 * N_CALLS)
    assert all(value % size == 0 for value in totals)
    assert all("deleted" in message for message in read_errors), read_errors[:3]
