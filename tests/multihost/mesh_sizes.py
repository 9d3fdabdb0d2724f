"""Run the example graph on meshes of 1, 2 and 4 simulated devices; print one JSON line per size."""

import json
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"  # the meshes are of host devices, on a GPU machine too

import jax
import numpy as np
import pytensor

import gpubackend
from tests.multihost.graph import example_graph, example_inputs

for size in (1, 2, 4):
    inputs, outputs = example_graph()
    mode = gpubackend.jax_gpu_mode(devices=jax.devices("cpu")[:size], shard={"x": 0})
    rowwise, total = pytensor.function(inputs, outputs, mode=mode)(*example_inputs())
    print(
        json.dumps(
            {
                "size": size,
                "spec": str(rowwise.sharding.spec),
                "rowwise": np.asarray(rowwise).tolist(),
                "total": float(total),
            }
        )
    )
