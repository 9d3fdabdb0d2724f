"""Data-parallel JAX_GPU over a mesh of simulated host devices, and over two processes."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from jax.sharding import PartitionSpec
from pytensor.compile.builders import OpFromGraph

import gpubackend
from gpubackend import DeviceNotFoundError, InputDeviceError, jax_gpu_mode
from gpubackend.conformance.catalogue import CATALOGUE
from tests.jax_lowering_harness import read_only
from tests.multihost.graph import example_graph, example_inputs

REPO = Path(__file__).resolve().parents[1]
CPU_DEVICES = jax.devices("cpu")
MESH_SIZES = sorted({1, len(CPU_DEVICES)})


def batched_graphs():
    """Graphs with a batch axis 0 on x: elementwise, reductions over the split axis, scan, OFG."""
    x = pt.matrix("x")
    w = pytensor.shared(read_only(np.linspace(0.5, 1.5, 3)), name="w", borrow=True)
    scaled = OpFromGraph([x], [pt.exp(-(x**2))], inline=False)(x)
    running = pytensor.scan(
        lambda row, acc: acc + row * w,
        sequences=[x],
        outputs_info=[pt.zeros(3)],
        return_updates=False,
    )
    return [x], [pt.tanh(x @ w), x.sum(axis=0), (x**2).mean(), scaled, running[-1]]


def test_sharded_results_equal_single_device_results():
    inputs, outputs = batched_graphs()
    values = [np.random.default_rng(0).normal(size=(8, 3))]
    reference = pytensor.function(inputs, outputs, mode="FAST_COMPILE")(*values)
    for size in MESH_SIZES:
        mode = jax_gpu_mode(devices=CPU_DEVICES[:size], shard={"x": 0})
        results = pytensor.function(inputs, outputs, mode=mode)(*values)
        for result, expected in zip(results, reference, strict=True):
            np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-12)


def test_split_outputs_stay_split_and_reductions_are_replicated():
    inputs, outputs = batched_graphs()
    fn = pytensor.function(inputs, outputs, mode=jax_gpu_mode(devices="cpu", shard={"x": 0}))
    rowwise, column_sums, mean, *_ = fn(np.ones((4, 3)))
    assert rowwise.sharding.spec == PartitionSpec("devices")
    assert set(rowwise.sharding.device_set) == set(CPU_DEVICES)
    for replicated in (column_sums, mean):
        assert replicated.sharding.is_fully_replicated


def test_shared_variables_are_placed_once_as_declared():
    x = pt.vector("x")
    # Read-only: JAX_GPU keeps them resident (a writeable host value is uploaded every call).
    table = pytensor.shared(read_only(np.arange(4.0)), name="table", borrow=True)
    bias = pytensor.shared(read_only(1.0), name="bias", borrow=True)
    fn = pytensor.function(
        [x], x * table + bias, mode=jax_gpu_mode(devices="cpu", shard={x: 0, "table": 0})
    )
    fn(np.ones(4))
    # The function's own device copies (its thunk's input cells): the containers keep the host
    # values.
    resident = {
        variable: cell[0]
        for variable, cell in zip(fn.maker.fgraph.inputs, fn.vm.inputs, strict=True)
    }
    assert resident[table].sharding.spec == PartitionSpec("devices")
    assert resident[bias].sharding.is_fully_replicated
    resident_x = jax.device_put(np.ones(4), fn.input_storage[0].type.sharding)
    with jax.transfer_guard("disallow_explicit"):
        out = fn(resident_x)
    np.testing.assert_allclose(np.asarray(out), np.arange(4.0) + 1.0)


def test_warm_resident_sharded_call_makes_no_transfer():
    inputs, outputs = batched_graphs()
    fn = pytensor.function(inputs, outputs, mode=jax_gpu_mode(devices="cpu", shard={"x": 0}))
    resident_x = jax.device_put(np.ones((4, 3)), fn.input_storage[0].type.sharding)
    fn(resident_x)
    with jax.transfer_guard("disallow_explicit"):
        fn(resident_x)


def test_updates_donate_sharded_buffers():
    x = pt.vector("x")
    acc = pytensor.shared(np.zeros(4), name="acc")
    fn = pytensor.function(
        [x], [], updates={acc: acc + x}, mode=jax_gpu_mode(devices="cpu", shard={x: 0, acc: 0})
    )
    fn(np.ones(4))
    previous = acc.get_value(borrow=True)
    fn(np.ones(4))
    assert previous.is_deleted()
    np.testing.assert_allclose(np.asarray(acc.get_value()), 2.0)


@pytest.mark.skipif(len(CPU_DEVICES) < 2, reason="needs at least two simulated host devices")
def test_axis_that_devices_do_not_divide_is_rejected_by_name():
    x = pt.matrix("x")
    fn = pytensor.function([x], x * 2, mode=jax_gpu_mode(devices="cpu", shard={"x": 0}))
    with pytest.raises(
        ValueError, match=r"input 'x' \(position 0\) is split along axis 0 over 2 devices.*length 3"
    ):
        fn(np.ones((3, 2)))


@pytest.mark.skipif(len(CPU_DEVICES) < 2, reason="needs at least two simulated host devices")
def test_static_shape_that_devices_do_not_divide_fails_at_compile_time():
    x = pt.tensor("x", shape=(5, 2))
    with pytest.raises(ValueError, match=r"static shape.*length 5"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices="cpu", shard={x: 0}))


def test_shard_naming_an_unknown_input_is_rejected():
    x = pt.matrix("x")
    with pytest.raises(ValueError, match=r"shard names input 'y'.*its inputs: 'x'"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices="cpu", shard={"y": 0}))


def test_shard_axis_out_of_range_is_rejected():
    x = pt.vector("x")
    with pytest.raises(ValueError, match=r"1 dimensions, so the axis must be in 0..0"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices="cpu", shard={x: 1}))


def test_shard_axis_that_is_not_an_integer_is_rejected_as_such():
    x = pt.vector("x")
    with pytest.raises(ValueError, match=r"shard\['x'\] = 'a': expected an integer axis.*a str"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices="cpu", shard={"x": "a"}))


def test_shard_axis_of_a_scalar_is_rejected_as_such():
    y = pt.scalar("y")
    with pytest.raises(ValueError, match=r"the input is a scalar \(0 dimensions\)"):
        pytensor.function([y], y * 2, mode=jax_gpu_mode(devices="cpu", shard={"y": 0}))


def test_shard_axis_may_be_a_numpy_integer():
    x = pt.vector("x")
    mode = jax_gpu_mode(devices="cpu", shard={"x": np.int64(0)})
    fn = pytensor.function([x], x * 2, mode=mode)
    np.testing.assert_allclose(np.asarray(fn(np.arange(4.0))), np.arange(4.0) * 2)


def test_an_empty_list_of_devices_is_rejected_by_name():
    x = pt.vector("x")
    with pytest.raises(ValueError, match=r"devices=\[\] names no device"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices=[]))


def test_missing_devices_are_rejected():
    x = pt.vector("x")
    with pytest.raises(DeviceNotFoundError, match=r"'cpu:9' \(in devices=\).*count=10"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices=["cpu:0", "cpu:9"], shard={x: 0}))
    with pytest.raises(DeviceNotFoundError, match="'gpu:99'"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices=["gpu:99"], shard={x: 0}))


def test_conflicting_placement_arguments_are_rejected():
    with pytest.raises(ValueError, match=r"either device= .* or devices="):
        jax_gpu_mode("cpu:0", devices="cpu")
    with pytest.raises(ValueError, match="pass devices= as well"):
        jax_gpu_mode(shard={"x": 0})


def test_input_with_another_sharding_is_rejected():
    x = pt.matrix("x")
    fn = pytensor.function([x], x * 2, mode=jax_gpu_mode(devices="cpu", shard={"x": 0}))
    single = jax.device_put(np.ones((4, 2)), CPU_DEVICES[0])
    if len(CPU_DEVICES) == 1:
        pytest.skip("with one device every placement is the same")
    with pytest.raises(InputDeviceError, match="input 'x'"):
        fn(single)


def _single_process_reference():
    inputs, outputs = example_graph()
    return pytensor.function(inputs, outputs, mode="FAST_COMPILE")(*example_inputs())


def test_mesh_sizes_one_two_four_agree():
    result = subprocess.run(
        [sys.executable, "-m", "tests.multihost.mesh_sizes"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [run["size"] for run in runs] == [1, 2, 4]
    rowwise, total = _single_process_reference()
    for run in runs:
        if run["size"] > 1:
            assert "'devices'" in run["spec"], run
        np.testing.assert_allclose(run["rowwise"], rowwise, rtol=1e-12)
        assert run["total"] == pytest.approx(float(total), rel=1e-12)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_processes_over_loopback_agree_with_one():
    port = _free_port()
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.multihost.worker", str(rank), "2", str(port)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        outputs = [worker.communicate(timeout=150) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    rowwise, total = _single_process_reference()
    for worker, (stdout, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr[-3000:]
        [line] = [line for line in stdout.splitlines() if line.startswith("{")]
        seen = json.loads(line)
        assert seen["global_devices"] == 4
        np.testing.assert_allclose(seen["rowwise"], rowwise, rtol=1e-12)
        assert seen["total"] == pytest.approx(float(total), rel=1e-12)


BATCHED_CASES = [
    case
    for case in CATALOGUE.values()
    if case.batch_axes and any(axis is not None for axis in case.batch_axes)
]


def _divisible_batch(values, batch_axes, n_devices):
    """Stack each batched input with itself until the device count divides its batch axis."""
    lengths = {
        np.shape(value)[axis]
        for value, axis in zip(values, batch_axes, strict=True)
        if axis is not None
    }
    copies = next(
        k for k in range(1, n_devices + 1) if all(k * length % n_devices == 0 for length in lengths)
    )
    return [
        value if axis is None else np.concatenate([value] * copies, axis=axis)
        for value, axis in zip(values, batch_axes, strict=True)
    ]


@pytest.mark.parametrize("case", BATCHED_CASES, ids=lambda case: case.name)
def test_catalogue_case_sharded_along_its_batch_axis_matches_one_device(case, target_device):
    """The mesh is of the target's platform; results agree at the case's own tolerance.

    Sharding changes reduction orders, and an iterative solver amplifies a
    one-ulp difference (BFGS moves by ~5e-10 on a GPU), so a tighter bound
    would test the hardware, not the sharding.
    """
    graph = case.build()
    mesh_devices = gpubackend.devices.platform_devices(target_device.platform)
    values = _divisible_batch(graph.values, case.batch_axes, len(mesh_devices))
    shard = {
        variable: axis
        for variable, axis in zip(graph.inputs, case.batch_axes, strict=True)
        if axis is not None
    }
    single = pytensor.function(graph.inputs, graph.outputs, mode=jax_gpu_mode(target_device))(
        *values
    )
    sharded_fn = pytensor.function(
        graph.inputs, graph.outputs, mode=jax_gpu_mode(devices=mesh_devices, shard=shard)
    )
    for position, axis in enumerate(case.batch_axes):
        if axis is not None:
            assert sharded_fn.input_storage[position].type.sharding.spec[axis] == "devices"
    sharded = sharded_fn(*values)
    for got, expected in zip(sharded, single, strict=True):
        np.testing.assert_allclose(
            np.asarray(got), np.asarray(expected), rtol=graph.rtol, atol=graph.atol
        )


@pytest.mark.skipif(
    bool(gpubackend.devices.platform_devices("gpu")),
    reason="this machine has a GPU, so a missing GPU cannot be observed",
)
def test_mesh_of_all_gpus_without_a_gpu_is_rejected():
    x = pt.vector("x")
    with pytest.raises(DeviceNotFoundError, match=r"'gpu'.*gpubackend\[cuda13\]"):
        pytensor.function([x], x * 2, mode=jax_gpu_mode(devices="gpu", shard={x: 0}))
