"""One process of the two-process, loopback test of multi-host JAX_GPU.

Usage: worker.py PROCESS_ID NUM_PROCESSES PORT. Prints one JSON line with
the outputs this process sees. Each process has two simulated host devices
and JAX's gloo CPU collectives, so the mesh spans four devices in two processes.
The platform is pinned to the CPU: on a GPU machine both processes would
otherwise open the same GPU as their default backend.

gpubackend is imported before ``jax.distributed.initialize``, which must run
before anything initialises an XLA backend: importing gpubackend must not.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax

import gpubackend

process_id, num_processes, port = (int(arg) for arg in sys.argv[1:4])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}",
    num_processes=num_processes,
    process_id=process_id,
    initialization_timeout=60,
)

import numpy as np  # noqa: E402
import pytensor  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from tests.multihost.graph import example_graph, example_inputs  # noqa: E402

inputs, outputs = example_graph()
fn = pytensor.function(inputs, outputs, mode=gpubackend.jax_gpu_mode(devices="cpu", shard={"x": 0}))
rowwise, total = fn(*example_inputs())
print(
    json.dumps(
        {
            "process": jax.process_index(),
            "global_devices": jax.device_count("cpu"),
            "rowwise": np.asarray(multihost_utils.process_allgather(rowwise, tiled=True)).tolist(),
            "total": float(np.asarray(total)),
        }
    ),
    flush=True,
)
jax.distributed.shutdown()
