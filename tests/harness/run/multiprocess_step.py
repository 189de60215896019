"""Driver for test_multiprocess.py (not a test): one process of a ``jax.distributed`` job that runs each
``experiments/multiprocess-cpu.toml`` variant of a given process count, as the worker does (same
distributed join, config, mesh, stage and inputs), and writes from process 0 the gathered outputs
and the static metrics.

    python multiprocess_step.py MANIFEST PROCESSES PROCESS_ID COORDINATOR OUT.npz
"""

from __future__ import annotations

import json
import sys

from harness.run import distributed


def main(manifest: str, processes: int, process_id: int, coordinator: str, out: str) -> None:
    if processes > 1:
        distributed.join("cpu", processes, process_id, coordinator)
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from harness.expansion import load_sweep
    from harness.model import build_config, model_workload
    from harness.run.jax_stage import JaxStage
    from ltx2 import build_mesh, build_stage

    arrays, statics = {}, {}
    for v in load_sweep(manifest).variants:
        if v.target.processes != processes:
            continue
        strategy = v.config_overrides["transformer.sharding"]
        mesh = build_mesh(v.target.resolved().mesh_shape, devices=jax.devices())
        with jax.set_mesh(mesh):
            stage = JaxStage(
                build_stage(
                    "denoise_step", build_config(v.preset, v.config_overrides), model_workload(v.workload), mesh
                )
            )
            statics[strategy] = {k: val for k, val in stage.static().items() if k not in distributed.STATIC_VOLATILE}
            stage.prepare()
            for i, o in enumerate(stage.run()):
                arrays[f"{strategy}/{i}"] = np.asarray(multihost_utils.process_allgather(o, tiled=True))
    if process_id == 0:
        np.savez(out, **arrays)
        with open(out + ".json", "w") as f:
            json.dump(statics, f, sort_keys=True, default=str)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
