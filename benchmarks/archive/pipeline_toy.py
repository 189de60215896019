"""Would an interleaved two-stage pipeline beat tensor parallelism for the 19B video stream on v6e-8?

Toy of the video stream's matmuls and collectives at the 19B sizes (D 4096, FFN 16384, 48 layers,
two CFG rows of 6144 tokens, bf16), no attention kernel (its K/V are all-gathered and read, so the
gather is in the program, but the scores are not computed; the kernel's FLOPs are ~20% of a layer's
and the same in both layouts). Two layouts of the same layer function, compiled for a TPU topology
without the hardware and priced by the harness's simulator:

* ``tensor``: data 2 x context 2 x tensor 2, the layout the search found best: heads and the FFN's
  hidden units over tensor (the output projections' bf16 partial sums all-reduced over the pair),
  tokens over context (K/V all-gathered over it), the CFG rows over data; 48 layers in a scan.
* ``pipeline``: data 2 as two stages x context 4: stage s holds layers s, s + 2, ..., s + 46
  whole (weights stored stage-major, 9.6 GB per chip), the two CFG rows are the microbatches. At
  step t stage s runs layer t - m of row m = (t - s) mod 2, then the stages swap their activations
  (one collective-permute across the data pair); 49 steps, one idle layer per stage.

    JAX_PLATFORMS=cpu TPU_ACCELERATOR_TYPE=v6e-8 TPU_WORKER_HOSTNAMES=localhost ALLOW_MULTIPLE_LIBTPU_LOAD=1 \\
        PYTHONPATH=$PWD .nox/aot/bin/python benchmarks/archive/pipeline_toy.py v6e:2x4   # or tpu7x:2x2x1 (v7x-8)

Compiled here (2026-11-27, libtpu 0.0.42.1, v6e:2x4, the async-collective flags), per step:

    tensor:   147.2 ms, 4.55x the 32.3 ms matmul floor; compute 36.9 ms, exposed collectives 110.3 ms
              (all-reduce 44.1, collective-permute 43.7, all-gather 22.5)
    pipeline:  79.0 ms, 2.44x; compute 38.9 ms, exposed collectives 40.1 ms (the K/V all-gathers over
              context 4: 34.0, nothing in the toy's layer to run beside them; the stage swap: 6.1)

both with 9.1 GiB of arguments and temporaries. On v7x (``tpu7x:2x2x1``, where the tensor pair
is the two cores of one chip) the order flips: tensor 62.1 ms (2.41x the 25.7 ms floor), pipeline
117.5 ms (the K/V all-gathers over 4 devices cross chips: 74.1 ms exposed). A toy: no attention
kernel, no audio stream, no modulation. The model runs this layout with
``transformer.pipeline_stages = 2`` (v6e.toml's ``pipeline2-splash``: 101.0 ms against 186.9 ms).

Prints per layout: the simulated step, the matmul floor (matmul FLOPs per device at the spec's
peak), the device's compute time and exposed collective time (ms), collective counts and operand
bytes per kind, and the arguments + temporaries.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from harness import targets
from harness.metrics import timeline
from harness.metrics.hlo import collective_stats, parse
from harness.run.predicted import device_coords
from ltx2 import sharding

ASYNC_FLAGS = {
    "xla_enable_async_all_reduce": True,
    "xla_enable_async_all_gather": True,
    "xla_tpu_overlap_compute_collective_tc": True,
    "xla_tpu_enable_async_collective_fusion": True,
    "xla_tpu_enable_async_collective_fusion_fuse_all_gather": True,
    "xla_tpu_enable_async_collective_fusion_fuse_all_reduce": True,
    "xla_tpu_enable_async_collective_fusion_multiple_steps": True,
}
D, F, L, LAYERS, ROWS = 4096, 16384, 6144, 48, 2
BF16 = jnp.bfloat16


def layer(h: jax.Array, w: tuple[jax.Array, ...], specs: dict[str, Any]) -> jax.Array:
    """One toy block on ``h [B, L, D]``: Q/K/V projection, K/V gathered over the tokens and read
    (a mean of k * v stands in for the kernel), output projection, residual; FFN, residual."""
    wqkv, wo, w1, w2 = w
    c = jax.lax.with_sharding_constraint
    qkv = c(jnp.einsum("bld,de->ble", h, wqkv), specs["heads3"])
    q, k, v = jnp.split(qkv, 3, axis=-1)
    k, v = c(k, specs["kv"]), c(v, specs["kv"])  # every token's keys and values: the gather
    ctx = (k.astype(jnp.float32) * v).mean(axis=1, keepdims=True).astype(BF16)
    o = c(jnp.einsum("bld,de->ble", (q + ctx).astype(BF16), wo, preferred_element_type=BF16), specs["tokens"])
    h = c(h + o, specs["tokens"])
    y = c(jax.nn.gelu(jnp.einsum("bld,df->blf", h, w1)), specs["hidden"])
    out = jnp.einsum("blf,fd->bld", y, w2, preferred_element_type=BF16)
    return c(h + out, specs["tokens"])


def tensor_layout(mesh: jax.sharding.Mesh) -> tuple[Any, tuple[Any, ...]]:
    n = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    specs = {
        "tokens": n("data", "context", None),
        "heads3": n("data", "context", "tensor"),
        "kv": n("data", None, "tensor"),
        "hidden": n("data", "context", "tensor"),
    }

    def run(x: jax.Array, ws: tuple[jax.Array, ...]) -> jax.Array:
        def body(h: jax.Array, w: tuple[jax.Array, ...]) -> tuple[jax.Array, None]:
            return layer(h, w, specs), None

        return jax.lax.scan(body, x, ws)[0]

    shapes = ((D, 3 * D), (D, D), (D, F), (F, D))
    axes = (P(None, None, "tensor"), P(None, "tensor", None), P(None, None, "tensor"), P(None, "tensor", None))
    ws = tuple(
        jax.ShapeDtypeStruct((LAYERS, *s), BF16, sharding=NamedSharding(mesh, a))
        for s, a in zip(shapes, axes, strict=True)
    )
    return run, (jax.ShapeDtypeStruct((ROWS, L, D), BF16, sharding=specs["tokens"]), ws)


def pipeline_layout(mesh: jax.sharding.Mesh) -> tuple[Any, tuple[Any, ...]]:
    n = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    # inside the stage vmap (spmd_axis_name="data"): one row, tokens over context
    specs = {
        "tokens": P(None, "context", None),
        "heads3": P(None, "context", None),
        "kv": P(None, None, None),
        "hidden": P(None, "context", None),
    }
    steps = LAYERS + 1

    def run(x: jax.Array, ws: tuple[jax.Array, ...]) -> jax.Array:
        stage = jnp.arange(2)

        def body(buf: jax.Array, t: jax.Array) -> tuple[jax.Array, None]:
            row = (t - stage) % 2
            depth = t - row  # the layer each stage runs: 2 j + s
            valid = (depth >= 0) & (depth < LAYERS)
            j = jnp.clip(depth // 2, 0, LAYERS // 2 - 1)
            pick = lambda ww, i: tuple(jax.lax.dynamic_index_in_dim(a, i, 0, False) for a in ww)  # noqa: E731
            w = jax.vmap(pick, spmd_axis_name="data")(ws, j)
            out = jax.vmap(lambda h, ww: layer(h[None], ww, specs)[0], spmd_axis_name="data")(buf, w)
            buf = jnp.where(valid[:, None, None], out, buf)
            buf = jax.lax.with_sharding_constraint(buf[::-1], n("data", "context", None))  # the stages swap
            return buf, None

        buf = jax.lax.scan(body, x, jnp.arange(steps))[0]
        return buf if steps % 2 == 0 else buf[::-1]  # row m ends where its last layer's swap left it

    shapes = ((D, 3 * D), (D, D), (D, F), (F, D))
    ws = tuple(jax.ShapeDtypeStruct((2, LAYERS // 2, *s), BF16, sharding=n("data", None, None, None)) for s in shapes)
    return run, (jax.ShapeDtypeStruct((ROWS, L, D), BF16, sharding=n("data", "context", None)), ws)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("topology", nargs="?", default="v6e:2x4")
    p.add_argument("--layouts", nargs="+", default=["tensor", "pipeline"])
    args = p.parse_args()
    devices = targets.compile_devices("tpu", args.topology)
    meshes = {
        "tensor": ({"data": 2, "context": 2, "tensor": 2}, tensor_layout),
        "pipeline": ({"data": 2, "context": 4}, pipeline_layout),
    }
    for name in args.layouts:
        axes, build = meshes[name]
        mesh = sharding.build_mesh(axes, devices)
        spec = timeline.spec_for(args.topology, "tpu", device_coords(list(mesh.devices.flat)))
        run, inputs = build(mesh)
        with jax.set_mesh(mesh):
            compiled = jax.jit(run).lower(*inputs).compile(compiler_options=dict(ASYNC_FLAGS))
        module = parse(compiled.as_text())
        step = timeline.predict(module, spec)
        flops = 2 * ROWS * L * LAYERS * (3 * D * D + D * D + 2 * D * F) / len(devices)
        floor = flops / spec.value("peak_flops_per_s")
        stats = collective_stats(module)
        kinds = ", ".join(
            f"{k} {s.count} ({s.operand_bytes / 1e9:.2f} GB)" for k, s in sorted(stats.by_kind.items()) if s.count
        )
        mem = compiled.memory_analysis()
        peak = (mem.argument_size_in_bytes + mem.temp_size_in_bytes) / 2**30 if mem is not None else float("nan")
        dev = step.device
        exposed = ", ".join(f"{k} {v / 1e6:.1f}" for k, v in sorted(dev.get("exposed_ns_by_kind", {}).items()) if v)
        print(
            f"{name}: predicted {step.step_ns / 1e6:.1f} ms, matmul floor {floor * 1e3:.1f} ms "
            f"({step.step_ns / 1e9 / floor:.2f}x); compute {dev.get('compute_ns', 0) / 1e6:.1f} ms, exposed "
            f"collectives {dev.get('exposed_collective_ns', 0) / 1e6:.1f} ms ({exposed or 'none'}); {kinds}; "
            f"arguments + temps {peak:.1f} GiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
