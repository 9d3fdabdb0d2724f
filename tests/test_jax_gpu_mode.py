"""JAX_GPU mode: device selection, residency, donation and input errors."""

import pickle
from typing import ClassVar

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_mode
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.jax.linker import JAXLinker

import gpubackend
from gpubackend import DeviceNotFoundError, InputDeviceError, jax_gpu_mode
from gpubackend.linker import JAXGPULinker
from tests.jax_lowering_harness import read_only


@pytest.fixture
def other_device(target_device):
    return next(d for d in jax.devices("cpu") if d != target_device)


def resident(value, device, dtype="float64"):
    return jax.device_put(np.asarray(value, dtype=dtype), device)


HAS_GPU = bool(gpubackend.devices.platform_devices("gpu"))


@pytest.mark.skipif(
    HAS_GPU, reason="on a GPU runner the target is the GPU, which is JAX's default device"
)
def test_target_is_not_the_default_device(target_device):
    # The whole suite relies on this to expose data that drifts to device 0.
    assert target_device != jax.devices()[0]


def test_mode_is_registered_by_name():
    mode = get_mode("JAX_GPU")
    assert isinstance(mode.linker, JAXGPULinker)
    assert isinstance(mode.linker, JAXLinker)


def test_outputs_are_committed_to_the_target_device(target_device):
    x = pt.vector("x")
    fn = pytensor.function([x], [x * 2, x.sum()], mode="JAX_GPU")
    doubled, total = fn(np.arange(3.0))
    for out in (doubled, total):
        assert isinstance(out, jax.Array)
        assert out.devices() == {target_device}
    np.testing.assert_allclose(np.asarray(doubled), [0.0, 2.0, 4.0])
    assert float(total) == 3.0


def test_resident_call_makes_no_transfer(target_device):
    x = pt.vector("x")
    s = pytensor.shared(read_only(np.linspace(0, 1, 7)), name="s", borrow=True)
    fn = pytensor.function([x], (x * 2 + s).sum(), mode="JAX_GPU")
    x_dev = resident(np.ones(7), target_device)
    expected = float(np.sum(np.ones(7) * 2 + np.linspace(0, 1, 7)))
    assert float(fn(x_dev)) == pytest.approx(expected)
    with jax.transfer_guard("disallow_explicit"):
        out = fn(x_dev)
    assert float(out) == pytest.approx(expected)


def test_stock_jax_mode_transfers_on_every_call(target_device):
    # The baseline this backend beats: the same call under stock JAX re-uploads.
    x = pt.vector("x")
    s = pytensor.shared(np.linspace(0, 1, 7), name="s")
    fn = pytensor.function([x], (x * 2 + s).sum(), mode="JAX")
    x_dev = resident(np.ones(7), target_device)
    fn(x_dev)
    with pytest.raises(Exception, match=r"[Dd]isallowed"):
        with jax.transfer_guard("disallow_explicit"):
            fn(x_dev)


def test_resident_input_is_not_copied(target_device):
    x = pt.vector("x")
    fn = pytensor.function([x], x, mode="JAX_GPU")
    x_dev = resident(np.arange(4.0), target_device)
    filtered = fn.input_storage[0].type.filter(x_dev)
    assert filtered is x_dev


def test_shared_variable_is_uploaded_once_and_set_value_replaces_it():
    s = pytensor.shared(read_only(np.arange(3.0)), name="s", borrow=True)
    fn = pytensor.function([], s * 2, mode="JAX_GPU")
    fn()
    with jax.transfer_guard("disallow_explicit"):
        fn()
    s.set_value(read_only([5.0, 6.0, 7.0]), borrow=True)
    np.testing.assert_allclose(np.asarray(fn()), [10.0, 12.0, 14.0])
    with jax.transfer_guard("disallow_explicit"):
        again = fn()
    np.testing.assert_allclose(np.asarray(again), [10.0, 12.0, 14.0])


def test_updates_donate_the_previous_buffer(target_device):
    x = pt.vector("x")
    acc = pytensor.shared(np.zeros(3), name="acc")
    fn = pytensor.function([x], acc.sum(), updates={acc: acc + x}, mode="JAX_GPU")
    x_dev = resident(np.ones(3), target_device)
    fn(x_dev)
    previous = acc.get_value(borrow=True)
    fn(x_dev)
    assert previous.is_deleted()
    np.testing.assert_allclose(np.asarray(acc.get_value()), [2.0, 2.0, 2.0])
    with jax.transfer_guard("disallow_explicit"):
        fn(x_dev)
    np.testing.assert_allclose(np.asarray(acc.get_value()), [3.0, 3.0, 3.0])


def test_numpy_input_is_uploaded_to_the_target(target_device):
    x = pt.vector("x")
    fn = pytensor.function([x], x + 1, mode="JAX_GPU")
    assert fn(np.zeros(2)).devices() == {target_device}


def test_array_on_another_device_is_rejected_by_name(other_device):
    x = pt.vector("x")
    fn = pytensor.function([x], x + 1, mode="JAX_GPU")
    with pytest.raises(InputDeviceError, match=r"input 'x' \(position 0\).*device_put"):
        fn(resident(np.zeros(2), other_device))


@pytest.mark.parametrize(
    "value, message",
    [
        (np.zeros(2, dtype="float32"), "expected dtype float64"),
        (np.zeros((2, 2)), "expected 1 dimensions"),
        (np.zeros(3), r"expected static shape \(2,\)"),
    ],
)
def test_mismatched_resident_input_names_the_input(target_device, value, message):
    x = pt.tensor("x", shape=(2,), dtype="float64")
    fn = pytensor.function([x], x * 3, mode="JAX_GPU")
    with pytest.raises(TypeError, match=f"input 'x'.*{message}"):
        fn(jax.device_put(value, target_device))


def test_numpy_inputs_keep_pytensor_casting_rules():
    x = pt.vector("x", dtype="float32")
    fn = pytensor.function([x], x * 2, mode="JAX_GPU")
    with pytest.raises(TypeError, match="loss of precision"):
        fn(np.zeros(2, dtype="float64"))
    assert fn(np.zeros(2, dtype="int8")).dtype == np.float32


def test_dlpack_host_producer_is_accepted(target_device):
    class HostDLPack:
        """A foreign array that only speaks DLPack, like a CPU torch tensor."""

        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    x = pt.vector("x")
    fn = pytensor.function([x], x * 2, mode="JAX_GPU")
    out = fn(HostDLPack(np.arange(3.0)))
    assert out.devices() == {target_device}
    np.testing.assert_allclose(np.asarray(out), [0.0, 2.0, 4.0])


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU, so a missing GPU cannot be observed")
def test_missing_gpu_raises_device_not_found():
    x = pt.vector("x")
    with pytest.raises(DeviceNotFoundError) as excinfo:
        pytensor.function([x], x + 1, mode=jax_gpu_mode("gpu"))
    message = str(excinfo.value)
    assert "cpu:0" in message and "cpu:1" in message
    assert "gpubackend[cuda13]" in message and "gpubackend[cuda12]" in message
    # The device was passed to jax_gpu_mode, where $GPUBACKEND_DEVICE is not read.
    assert "pass device='cpu' to jax_gpu_mode" in message
    assert "GPUBACKEND_DEVICE" not in message
    assert isinstance(excinfo.value, RuntimeError)


@pytest.mark.parametrize("spec", ["cpu:7", "gpu:99"])
def test_out_of_range_device_raises_device_not_found(spec):
    with pytest.raises(DeviceNotFoundError, match=f"'{spec}'"):
        gpubackend.resolve_device(spec)


def test_a_host_device_past_the_simulated_ones_names_the_xla_flag_that_makes_it():
    with pytest.raises(DeviceNotFoundError) as excinfo:
        gpubackend.resolve_device("cpu:7")
    message = str(excinfo.value)
    assert "'cpu:7' (given as device=) does not exist" in message
    assert "--xla_force_host_platform_device_count=8" in message
    assert "before JAX starts" in message
    assert "pass device='cpu' to jax_gpu_mode" in message


def test_a_missing_device_from_the_environment_says_so_and_how_to_change_it(monkeypatch):
    monkeypatch.setenv("GPUBACKEND_DEVICE", "cpu:7")
    x = pt.vector("x")
    with pytest.raises(DeviceNotFoundError) as excinfo:
        pytensor.function([x], x + 1, mode="JAX_GPU")
    message = str(excinfo.value)
    assert "'cpu:7' (from $GPUBACKEND_DEVICE) does not exist" in message
    assert "--xla_force_host_platform_device_count=8" in message
    assert message.endswith("set GPUBACKEND_DEVICE=cpu.")


def test_malformed_device_string_is_a_value_error():
    with pytest.raises(ValueError, match="'tpu:0' is not understood"):
        gpubackend.resolve_device("tpu:0")


@pytest.mark.parametrize("device", [123, 1.5, ["cpu"]])
def test_device_of_the_wrong_type_is_a_type_error_naming_the_argument(device):
    with pytest.raises(
        TypeError, match=r"device=.*expected 'gpu', 'gpu:N', 'cpu', 'cpu:N', a jax.Device or None"
    ):
        jax_gpu_mode(device)
    with pytest.raises(TypeError, match="device="):
        gpubackend.resolve_device(device)


@pytest.mark.parametrize("empty", ["", "  "])
def test_empty_device_environment_variable_means_the_default(monkeypatch, empty):
    monkeypatch.setenv("GPUBACKEND_DEVICE", empty)
    assert (
        gpubackend.devices.requested_device_spec(None) == gpubackend.devices.DEFAULT_DEVICE == "gpu"
    )


def test_device_is_read_from_environment_at_compile_time(monkeypatch, other_device):
    x = pt.vector("x")
    monkeypatch.setenv("GPUBACKEND_DEVICE", f"cpu:{other_device.id}")
    fn = pytensor.function([x], x + 1, mode="JAX_GPU")
    assert fn(np.zeros(2)).devices() == {other_device}


def test_explicit_jax_device_object(other_device):
    x = pt.vector("x")
    fn = pytensor.function([x], x + 1, mode=jax_gpu_mode(other_device))
    assert fn(np.zeros(2)).devices() == {other_device}


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX"])
@pytest.mark.parametrize("float_x", ["float32", "float64"])
def test_output_dtypes_match_the_graph(float_x, mode):
    with pytensor.config.change_flags(floatX=float_x):
        x = pt.vector("x")
        i = pt.vector("i", dtype="int32")
        fn = pytensor.function([x, i], [x * 2, i + 1, x.sum()], mode=mode)
        outs = fn(np.ones(2, dtype=float_x), np.ones(2, dtype="int32"))
        assert [o.dtype for o in outs] == [np.dtype(v.type.dtype) for v in fn.maker.fgraph.outputs]


@pytest.mark.gpu
def test_cupy_array_is_taken_zero_copy():
    cupy = pytest.importorskip("cupy")
    x = pt.vector("x")
    fn = pytensor.function([x], x * 2, mode=jax_gpu_mode("gpu:0"))
    values = cupy.arange(4, dtype="float64")
    filtered = fn.input_storage[0].type.filter(values)
    assert filtered.unsafe_buffer_pointer() == values.data.ptr
    np.testing.assert_allclose(np.asarray(fn(values)), [0.0, 2.0, 4.0, 6.0])


def test_importing_gpubackend_enables_x64_with_float64_floatx():
    # Users put float64 data on the device before their first compile.
    assert pytensor.config.floatX == "float64"
    assert jax.config.jax_enable_x64


def test_function_without_outputs_runs_its_updates(target_device):
    counter = pytensor.shared(np.float64(0.0), name="counter")
    fn = pytensor.function([], [], updates={counter: counter + 1}, mode="JAX_GPU")
    fn()
    fn()
    assert float(counter.get_value()) == 2.0
    assert counter.get_value(borrow=True).devices() == {target_device}


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX"])
def test_output_folded_to_a_python_float_keeps_the_graph_dtype(mode):
    # An inner output that folds to a constant reaches the jitted graph as a Python float.
    from pytensor.compile.builders import OpFromGraph

    a = pt.vector("a")
    op = OpFromGraph([a], [pt.tanh(pt.constant(0.5)), a + 1.0], inline=False)
    folded, shifted = op(a)
    fn = pytensor.function([a], [folded, shifted], mode=mode)
    out_folded, out_shifted = fn(np.zeros(2))
    assert np.asarray(out_folded).dtype == np.dtype(folded.type.dtype)
    assert float(out_folded) == pytest.approx(np.tanh(np.float32(0.5)), rel=1e-6)
    np.testing.assert_allclose(np.asarray(out_shifted), [1.0, 1.0])


def test_numpy_inputs_reach_the_device_through_jit_not_a_python_device_put(
    monkeypatch, target_device
):
    # Issue 25: a Python jax.device_put per input was three quarters of a small call's cost.
    x = pt.vector("x")
    i = pt.scalar("i", dtype="int64")
    fn = pytensor.function([x, i], [x * i, x.sum()], mode="JAX_GPU")
    fn(np.ones(3), 2)  # compiles

    def no_python_upload(*args, **kwargs):
        raise AssertionError("a Python jax.device_put in the call path")

    monkeypatch.setattr(jax, "device_put", no_python_upload)
    scaled, total = fn(np.arange(3.0), np.int64(2))
    assert scaled.devices() == {target_device} and total.devices() == {target_device}
    np.testing.assert_allclose(np.asarray(scaled), [0.0, 2.0, 4.0])
    assert float(total) == 3.0


def test_matching_numpy_input_is_left_to_jit_as_it_is():
    x = pt.tensor("x", shape=(None, 2), dtype="float64")
    fn = pytensor.function([x], x * 2, mode="JAX_GPU")
    values = np.zeros((3, 2))
    assert fn.input_storage[0].type.filter(values) is values


@pytest.mark.parametrize(
    "value, message",
    [
        (np.zeros(2, dtype="int8"), None),  # cast, as PyTensor casts it
        (np.zeros(2, dtype="complex128"), "loss of precision"),
        (np.zeros((2, 2)), "Wrong number of dimensions"),
        (np.zeros(3), r"shape \(\(2,\)\) is not compatible"),
    ],
)
def test_mismatched_numpy_input_keeps_pytensor_rules_and_messages(value, message):
    x = pt.tensor("x", shape=(2,), dtype="float64")
    i = pt.vector("i", dtype="int32")
    fn = pytensor.function([i, x], x * 3, mode="JAX_GPU", on_unused_input="ignore")
    if message is None:
        assert np.asarray(fn(np.zeros(1, "int32"), value)).dtype == np.float64
        return
    with pytest.raises(TypeError, match=message) as excinfo:
        fn(np.zeros(1, "int32"), value)
    assert "at index 1" in "".join(getattr(excinfo.value, "__notes__", []))


def test_numpy_outputs_mode_returns_numpy_and_keeps_updates_on_the_device(target_device):
    x = pt.vector("x")
    acc = pytensor.shared(np.zeros(3), name="acc")
    fn = pytensor.function(
        [x], [acc.sum(), x * 2], updates={acc: acc + x}, mode=jax_gpu_mode(outputs="numpy")
    )
    total, doubled = fn(np.ones(3))
    assert type(total) is np.ndarray and type(doubled) is np.ndarray
    assert total.dtype == np.float64 and total.shape == ()
    np.testing.assert_allclose(doubled, [2.0, 2.0, 2.0])
    previous = acc.get_value(borrow=True)
    assert isinstance(previous, jax.Array) and previous.devices() == {target_device}
    total, _ = fn(np.ones(3))
    assert float(total) == 3.0
    assert previous.is_deleted()  # the update still donates
    np.testing.assert_allclose(np.asarray(acc.get_value()), [2.0, 2.0, 2.0])


def test_numpy_outputs_mode_is_registered_by_name_and_survives_a_rebuilt_mode():
    # PyMC's compile rebuilds the mode as Mode(linker=mode.linker, ...): the rule is the linker's.
    from pytensor.compile.mode import Mode

    mode = get_mode("JAX_GPU_NUMPY")
    assert mode.linker.outputs == "numpy"
    rebuilt = Mode(linker=mode.linker, optimizer=mode.provided_optimizer)
    x = pt.vector("x")
    out = pytensor.function([x], x + 1, mode=rebuilt)(np.zeros(2))
    assert type(out) is np.ndarray
    assert isinstance(pytensor.function([x], x + 1, mode="JAX_GPU")(np.zeros(2)), jax.Array)


def test_numpy_outputs_of_a_while_scan_graph_are_cut_to_their_length():
    from pytensor.scan import until

    x0 = pt.scalar("x0")
    xs = pytensor.scan(
        lambda x: (x * 2, until(x > 50)),
        outputs_info=[x0],
        n_steps=100,
        return_updates=False,
    )
    fn = pytensor.function([x0], xs, mode=jax_gpu_mode(outputs="numpy"))
    out = fn(np.float64(1.0))
    assert type(out) is np.ndarray
    reference = pytensor.function([x0], xs, mode="FAST_COMPILE")(np.float64(1.0))
    assert len(reference) < 100
    np.testing.assert_array_equal(out, reference)


def test_unknown_outputs_kind_is_a_value_error_naming_the_argument():
    with pytest.raises(ValueError, match=r"outputs='host'.*'device', 'numpy'"):
        jax_gpu_mode(outputs="host")  # type: ignore[arg-type]


def test_jax_gpu_functions_take_the_lean_call_and_keep_function_semantics(target_device):
    from pytensor.compile.io import In

    from gpubackend.function import JAXGPUFunction

    x, y = pt.vector("x"), pt.scalar("y")
    acc = pytensor.shared(np.zeros(2), name="acc")
    fn = pytensor.function([x, y], x * y, updates={acc: acc + x}, mode="JAX_GPU")
    assert type(fn) is JAXGPUFunction and fn._direct is not None
    np.testing.assert_allclose(np.asarray(fn(np.ones(2), 3.0)), [3.0, 3.0])  # the lean call
    np.testing.assert_allclose(np.asarray(fn(y=2.0, x=np.ones(2))), [2.0, 2.0])  # keywords
    np.testing.assert_allclose(np.asarray(acc.get_value()), [2.0, 2.0])
    with pytest.raises(TypeError, match="Missing input"):
        fn(np.ones(2))
    with pytest.raises(TypeError, match="Too many parameter"):
        fn(np.ones(2), 1.0, np.ones(2), 2.0)  # more than the inputs and the shared variable
    with pytest.raises(TypeError, match="Wrong number of dimensions") as excinfo:
        fn(np.ones((2, 2)), 1.0)
    assert "at index 0" in "".join(excinfo.value.__notes__)
    copied = fn.copy()
    assert type(copied) is JAXGPUFunction
    assert copied(np.ones(2), 1.0).devices() == {target_device}
    z = pt.vector("z")
    borrowed = pytensor.function([In(x, borrow=True), In(z, borrow=True)], x + z, mode="JAX_GPU")
    assert borrowed._direct is None  # borrowed inputs that may alias: Function's own call
    same = np.ones(2)
    np.testing.assert_allclose(np.asarray(borrowed(same, same)), [2.0, 2.0])


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX_GPU_NUMPY", "device object", "mesh"])
def test_a_pickled_function_loads_linked_again_on_the_same_devices(mode, target_device):
    """PyMC's multiprocess sampling pickles the step's compiled function (as stock JAX allows);
    a JAX_GPU one failed with "cannot pickle 'jaxlib._jax.Device' object"."""
    x = pt.vector("x")
    total = pytensor.shared(np.zeros(()), name="total")
    modes = {
        "device object": jax_gpu_mode(device=target_device),
        "mesh": jax_gpu_mode(devices=jax.devices("cpu")[:2], shard={"x": 0}),
    }
    fn = pytensor.function(
        [x], (x**2).sum(), updates={total: total + x.sum()}, mode=modes.get(mode, mode)
    )
    value = np.arange(4.0)
    np.testing.assert_allclose(np.asarray(fn(value)), 14.0)
    loaded = pickle.loads(pickle.dumps(fn))
    np.testing.assert_allclose(np.asarray(loaded(value)), 14.0)
    # The loaded function has its own copy of the shared variable, as PyTensor's pickling gives.
    np.testing.assert_allclose(loaded.get_shared()[0].get_value(), 12.0)
    placed = loaded.maker.linker.placement.description
    assert placed == fn.maker.linker.placement.description
    if mode != "mesh":
        assert placed == str(target_device)


class _PrecisionProbe(Op):
    """An identity whose JAX lowering records JAX's matrix-product precision when it is traced."""

    seen: ClassVar[list] = []

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0]


@jax_funcify.register(_PrecisionProbe)
def _jax_precision_probe(op, **kwargs):
    def probe(x):
        _PrecisionProbe.seen.append(jax.config.jax_default_matmul_precision)
        return x

    return probe


@pytest.mark.parametrize(
    ("options", "traced_at"),
    [({}, "highest"), ({"matmul_precision": "default"}, None), ({"mode": "JAX"}, None)],
)
def test_float32_products_are_traced_at_the_references_precision(options, traced_at):
    """On a GPU, JAX's default lets XLA compute a float32 product in TensorFloat-32: on the H200 a
    256x256 product under JAX_GPU was 3e-4 off (relative) where FAST_COMPILE and NUMBA were 6e-7
    off. JAX_GPU traces its graph at "highest" unless told otherwise; stock JAX keeps JAX's."""
    x, y = pt.matrix("x", dtype="float32"), pt.matrix("y", dtype="float32")
    options = dict(options)
    mode = options.pop("mode", None) or jax_gpu_mode(**options)
    _PrecisionProbe.seen.clear()
    fn = pytensor.function([x, y], pt.dot(_PrecisionProbe()(x), y), mode=mode)
    a = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(np.asarray(fn(a, a.T)), a @ a.T)
    assert _PrecisionProbe.seen == [traced_at]


def test_an_unknown_matmul_precision_is_a_value_error_naming_the_argument():
    with pytest.raises(ValueError, match=r"matmul_precision='tf32': expected one of 'highest'"):
        jax_gpu_mode(matmul_precision="tf32")
