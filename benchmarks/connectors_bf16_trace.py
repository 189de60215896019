"""Where the text connectors' bfloat16 error comes from: each intermediate, ours against diffusers'.

Per seed (the bf16 suite's connectors component, ``tests/ltx2/bf16_cases.py``), diffusers runs in
float32 and in bfloat16 with forward hooks on its modules, ours in bfloat16 op by op (the same
functions and modules the model calls, in one jitted program, first layer of the chosen connector);
each intermediate's relative L2 distance from diffusers' float32 is divided by diffusers' bfloat16
one. The first intermediate whose median ratio is above 1 on most seeds names the operation that
rounds more than diffusers does. XLA may keep a value unrounded inside a fusion (its default excess
precision), so a later intermediate here can be closer than in the model's own program; the last
line is the model's own output.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python benchmarks/connectors_bf16_trace.py [audio|video] [seeds]

Result: benchmarks/results/bf16-accuracy-2026-11-29.md (third session).
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2.convert import from_diffusers
from ltx2.layers import gelu_tanh, layer_slice, rms_norm
from ltx2.rope import apply_rope
from ltx2.text import connectors as C
from tests.accuracy import deviation
from tests.ltx2 import bf16_cases as bc

NAMES = ("normed", "proj", "x0", "n1", "q", "qn", "attn_core", "attn", "x1", "n2", "gelu", "ff", "xL", "out")


def torch_intermediates(module: Any, modality: str, arrays: dict[str, np.ndarray], bf16: bool) -> dict:
    """diffusers' intermediates by name (hooks on the first block of ``modality``'s connector)."""
    import torch

    out: dict[str, np.ndarray] = {}
    conn = getattr(module, f"{modality}_connector")
    blk = conn.transformer_blocks[0]

    def save(name: str, take_input: bool = False) -> Any:
        def hook(_m: Any, inputs: tuple, output: Any) -> None:
            t = inputs[0] if take_input else (output[0] if isinstance(output, tuple) else output)
            out[name] = t.detach().float().numpy()

        return hook

    where = [
        (module.text_proj_in, "normed", True),
        (module.text_proj_in, "proj", False),
        (blk.norm1, "x0", True),
        (blk.norm1, "n1", False),
        (blk.attn1.to_q, "q", False),
        (blk.attn1.norm_q, "qn", False),
        (blk.attn1.to_out[0], "attn_core", True),
        (blk.attn1, "attn", False),
        (blk.norm2, "x1", True),
        (blk.norm2, "n2", False),
        (blk.ff.net[0], "gelu", False),
        (blk.ff, "ff", False),
        (conn.norm_out, "xL", True),
        (conn.norm_out, "out", False),
    ]
    handles = [m.register_forward_hook(save(name, inp)) for m, name, inp in where]
    x = torch.from_numpy(arrays["x"])
    with torch.no_grad():
        module(x.to(torch.bfloat16) if bf16 else x, torch.from_numpy(arrays["mask"]).long())
    for h in handles:
        h.remove()
    return out


def ours_intermediates(model: C.LTX2TextConnectors, modality: str, x: jax.Array, mask: jax.Array) -> dict:
    """Ours, op by op as ``LTX2TextConnectors.__call__`` and the first block compute them."""
    cfg, r = model.cfg, {}
    x = x.astype(jnp.bfloat16).reshape(*x.shape[:2], cfg.caption_channels, -1)
    r["normed"] = C.per_layer_masked_mean_norm(x, mask.sum(-1))
    assert model.text_proj_in is not None
    r["proj"] = model.text_proj_in(r["normed"])
    bias = C.additive_mask(mask, r["proj"].dtype)
    conn = getattr(model, f"{modality}_connector")
    x0 = r["x0"] = C.fill_with_registers(r["proj"], bias >= -9000.0, conn.learnable_registers[...])
    rope = C.connector_rope(x0.shape[0], x0.shape[1], conn.stream, cfg)
    graphdef, stacked = nnx.split(conn.transformer_blocks)
    blk = nnx.merge(graphdef, layer_slice(stacked, 0))
    a = blk.attn1
    n1 = r["n1"] = rms_norm(x0, C.EPS)
    r["q"] = a.to_q(n1)
    r["qn"] = a.norm_q(r["q"])
    q = apply_rope(r["qn"], rope, a.rope_type)
    k = apply_rope(a.norm_k(a.to_k(n1)), rope, a.rope_type)
    batch, seq, _ = x0.shape
    q, k, v = (t.reshape(batch, seq, a.num_heads, a.head_dim) for t in (q, k, a.to_v(n1)))
    r["attn_core"] = jax.nn.dot_product_attention(q, k, v).reshape(batch, seq, -1)
    r["attn"] = a.to_out(r["attn_core"])
    x1 = r["x1"] = x0 + r["attn"]
    r["n2"] = rms_norm(x1, C.EPS)
    r["gelu"] = gelu_tanh(blk.ff.proj_in(r["n2"]))
    r["ff"] = blk.ff.proj_out(r["gelu"])
    r["xL"] = x1 + r["ff"]
    r["out"] = rms_norm(r["xL"], C.EPS)
    return r


def main(modality: str = "audio", seeds: int = 24) -> None:
    import torch

    component = bc.connectors()
    trace = jax.jit(lambda s, x, m, g: ours_intermediates(nnx.merge(g, s), modality, x, m), static_argnums=3)
    whole = jax.jit(lambda s, x, m, g: nnx.merge(g, s)(x, m), static_argnums=3)
    index = {"video": 0, "audio": 1}[modality]
    ratios: dict[str, list[float]] = {n: [] for n in (*NAMES, "model out")}
    for seed in range(seeds):
        module, arrays = component.build(seed), component.inputs(seed)
        ref = torch_intermediates(module, modality, arrays, bf16=False)
        rounded = module.to(torch.bfloat16)
        theirs = torch_intermediates(rounded, modality, arrays, bf16=True)
        graph, state = nnx.split(from_diffusers(rounded.float(), dtype="bfloat16", param_dtype="bfloat16"))
        x, mask = jnp.asarray(arrays["x"]).astype(jnp.bfloat16), jnp.asarray(arrays["mask"])
        ours = {**trace(state, x, mask, graph), "model out": whole(state, x, mask, graph)[index]}
        for name in ratios:
            want = ref["out" if name == "model out" else name]
            got = np.asarray(ours[name], np.float32).reshape(want.shape)
            their = theirs["out" if name == "model out" else name]
            ratios[name].append(deviation(got, want).rel_l2 / max(deviation(their, want).rel_l2, 1e-30))
    for name, values in ratios.items():
        r = np.asarray(values)
        worse = int((r > 1).sum())
        print(f"{modality} {name:10s} rel L2 median ours/theirs {np.median(r):.3f}  worse on {worse}/{len(r)}")


if __name__ == "__main__":
    main(*(f(a) for f, a in zip((str, int), sys.argv[1:], strict=False)))
