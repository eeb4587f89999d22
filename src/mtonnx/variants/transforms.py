"""Per-file transforms a variant is built from: `transform(src, dst) -> details`, one small step each.

- `copy_fp32`: the export itself (the baseline);
- `ort_optimized`: onnxruntime.transformers' optimizer (model_type "bart"), the fusions it found;
- `naive_int8`: `quantize_dynamic(model, out, weight_type=QInt8)` and nothing else, the call tutorials show;
- `dynamic_int8`: the recipe that works on Marian: the tied lm_head untied first (passes.lm_head) so its MatMul
  becomes integer, only MatMuls quantized (embeddings and the sinusoidal position table stay fp32), per tensor
  or per channel, optionally only some sensitivity groups (variants.sensitivity), optionally with one activation
  scale per row (passes.row_scales, finished by `fused_row_scales`) so that no sentence's tokens depend on its
  batch;
- `blockwise`: ONNX Runtime's MatMulNBits (8 or 4 bits, per block of weights, accuracy_level 4), at 4 bits the
  embedding as GatherBlockQuantized;
- `fp16`: float16 weights with fp32 inputs/outputs (keep_io_types);
- `per_file`: one transform for the encoder, another for the decoders;
- `folded`, `with_cross_kv`, `with_tuned_step`: the tuned variants' graph passes around another transform.
(Static QDQ int8 with calibration is in variants.calibration.)
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from mtonnx.foundation.files import link_or_copy
from mtonnx.passes.cross_kv import extract_cross_kv
from mtonnx.passes.graph import node_scope
from mtonnx.passes.inplace_attention import inplace_step
from mtonnx.passes.key_transposes import fold_key_transposes
from mtonnx.passes.lm_head import untie_lm_head
from mtonnx.passes.row_scales import fuse_row_scaled, graphs, per_row_activations
from mtonnx.passes.tuned_step import tuned_step
from mtonnx.runtime import layout

Transform = Callable[[Path, Path], dict[str, Any]]
# Sensitivity groups: module paths (from node scopes) of the weight MatMuls / Gathers in each group.
GROUPS = {
    "embeddings": r"embed_tokens|embed_positions|^shared|^lm_head$",  # the Gathers (with op_types Gather)
    "encoder": r"^encoder\.layers",
    "self-attention": r"^decoder\.layers\.\d+\.self_attn\.",
    "cross-attention": r"^decoder\.layers\.\d+\.encoder_attn\.",
    "decoder FFN": r"^decoder\.layers\.\d+\.fc[12]",
    "lm_head": r"^lm_head",
}


def copy_fp32(src: Path, dst: Path) -> dict[str, Any]:
    """The file unchanged, its bytes shared with the export (a hard link where the filesystem allows)."""
    link_or_copy(src, dst)
    return {}


def staged_model(model: onnx.ModelProto, name: str, then: Transform, dst: Path) -> dict[str, Any]:
    """Save an edited model under its file name in a temp dir and apply `then` to it (onnxruntime's
    quantizers take paths; transforms may key their data by the file name)."""
    with tempfile.TemporaryDirectory() as work:
        staged = Path(work) / name
        onnx.save(model, str(staged))
        return then(staged, dst)


def dynamic_int8(
    untie: bool = True,
    per_channel: bool = False,
    op_types: tuple[str, ...] = ("MatMul",),
    groups: tuple[str, ...] | None = None,
    subgraphs: bool = False,
    row_scales: bool = False,
) -> Transform:
    """A dynamic-quantization transform: optionally untie the lm_head, quantize `op_types` (all nodes, or
    only those of the given sensitivity `groups`), per tensor or per channel; with `row_scales`, the activations
    quantized one row at a time (passes.row_scales; `fused_row_scales` finishes the directory)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        model = onnx.load(str(src))
        untied = untie_lm_head(model) if untie else 0
        nodes = None
        if groups is not None:
            pattern = "|".join(GROUPS[g] for g in groups)
            nodes = [n.name for n in model.graph.node if n.op_type in op_types and re.search(pattern, node_scope(n))]
            if not nodes:  # nothing of this group in this file: keep it fp32
                onnx.save(model, str(dst))
                return {"untied": untied, "quantized_nodes": 0}

        def quantize(staged: Path, out: Path) -> dict[str, Any]:
            quantize_dynamic(
                str(staged),
                str(out),
                op_types_to_quantize=list(op_types),
                per_channel=per_channel,
                weight_type=QuantType.QInt8,
                nodes_to_quantize=nodes,
                extra_options={"EnableSubgraph": subgraphs},
            )
            if row_scales:
                quantized = onnx.load(str(out))
                details["row_scaled_inputs"] = per_row_activations(quantized)
                onnx.save(quantized, str(out))
            return {}

        details: dict[str, Any] = {}
        staged_model(model, src.name, quantize, dst)
        every = graphs(onnx.load(str(dst)).graph)
        integer = sum(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for g in every for n in g.node)
        return {
            "untied": untied,
            "quantized_nodes": len(nodes) if nodes is not None else None,
            "integer_matmuls": integer,
            **details,
        }

    return transform


def fused_row_scales(directory: Path) -> dict[str, Any]:
    """Every ONNX file of a staged directory with its per-row scaled products fused (passes.row_scales), once
    the per-file transforms and the passes that read the standard form have run."""
    fused = {}
    for path in sorted(Path(directory).glob("*.onnx")):
        model = onnx.load(str(path))
        count = fuse_row_scaled(model)
        if count:
            onnx.save(model, str(path))
            fused[path.name] = count
    return {"fused_row_scaled": fused}


def blockwise(bits: int, block_size: int) -> Transform:
    """ONNX Runtime's weight-only block quantization (MatMulNBitsQuantizer): every MatMul with a 2-D initializer
    weight (the lm_head untied first) as MatMulNBits, `bits` 8 or 4, symmetric, one scale per `block_size`
    weights, accuracy_level 4 (int8 compute, the activations quantized per block of each row, so no two rows
    share a scale, unlike dynamic int8's one scale per batch); at 4 bits the token embedding Gather as
    GatherBlockQuantized too (ORT quantizes Gathers at 4 bits only; the sinusoidal position table stays fp32)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    ops = ("MatMul", "Gather") if bits == 4 else ("MatMul",)
    axes = (("MatMul", 0), ("Gather", 1))

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        model = onnx.load(str(src))
        untied = untie_lm_head(model)
        positions = [n.name for n in model.graph.node if n.op_type == "Gather" and "embed_positions" in n.input[0]]
        common = {"block_size": block_size, "is_symmetric": True, "accuracy_level": 4, "op_types_to_quantize": ops}
        config = DefaultWeightOnlyQuantConfig(bits=bits, quant_axes=axes, **common)
        quantizer = MatMulNBitsQuantizer(
            model, bits=bits, nodes_to_exclude=positions, quant_axes=axes, algo_config=config, **common
        )
        quantizer.process()
        onnx.save(quantizer.model.model, str(dst))
        ops_left = [n.op_type for n in quantizer.model.model.graph.node]
        return {
            "untied": untied,
            "matmul_nbits": ops_left.count("MatMulNBits"),
            "gather_block_quantized": ops_left.count("GatherBlockQuantized"),
        }

    return transform


def naive_int8(src: Path, dst: Path) -> dict[str, Any]:
    """The call tutorials show: quantize_dynamic(model, out, weight_type=QuantType.QInt8), nothing else."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return {}


def fp16(src: Path, dst: Path) -> dict[str, Any]:
    """float16 weights and compute, fp32 inputs and outputs (casts at the boundary)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))
    return {}


def ort_optimized(num_heads: int, hidden_size: int) -> Transform:
    """onnxruntime.transformers.optimizer with model_type "bart"; reports which fusions it found."""
    from onnxruntime.transformers.optimizer import optimize_model

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        optimized = optimize_model(
            str(src), model_type="bart", num_heads=num_heads, hidden_size=hidden_size, opt_level=0, use_gpu=False
        )
        optimized.save_model_to_file(str(dst))
        return {"fused": {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}}

    return transform


def per_file(encoder: Transform, decoders: Transform) -> Transform:
    """One transform for the encoder, another for the two decoder files (e.g. static encoder, dynamic decoder)."""

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        return (encoder if src.name == layout.ENCODER else decoders)(src, dst)

    return transform


def folded(then: Transform | None = None) -> Transform:
    """Fold the key transposes (passes.key_transposes), then apply `then` (e.g. dynamic int8) if given."""

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        model = onnx.load(str(src))
        count = fold_key_transposes(model)
        if then is None:
            onnx.save(model, str(dst))
            return {"folded_key_transposes": count}
        return {"folded_key_transposes": count, **staged_model(model, src.name, then, dst)}

    return transform


def with_cross_kv(transform: Transform) -> Transform:
    """`transform`, plus the cross K/V file (passes.cross_kv) extracted from the transformed decoder_model next
    to it (torch.export's graphs only; the runtime falls back to the split layout without it)."""

    def wrapped(src: Path, dst: Path) -> dict[str, Any]:
        details = transform(src, dst)
        if src.name == layout.DECODER:
            try:
                details.update(extract_cross_kv(dst, dst.parent / layout.CROSS_KV))
            except ValueError as err:  # e.g. a TorchScript export: its K/V reshapes read the decoder's hidden states
                details["cross_kv"] = f"not extracted (no lean layout): {err}"
        return details

    return wrapped


def with_tuned_step(transform: Transform) -> Transform:
    """`transform`, plus the tuned step (passes.tuned_step) and the in-place step (passes.inplace_attention)
    written next to the transformed decoder_with_past (a graph whose attention does not match is left without)."""

    def wrapped(src: Path, dst: Path) -> dict[str, Any]:
        details = transform(src, dst)
        if src.name == layout.DECODER_WITH_PAST:
            for key, rewrite, file in (
                ("tuned_step", tuned_step, layout.TUNED_STEP),
                ("inplace_step", inplace_step, layout.INPLACE_STEP),
            ):
                model = onnx.load(str(dst))
                try:
                    details[key] = rewrite(model)
                    onnx.save(model, str(dst.parent / file))
                except ValueError as err:
                    details[key] = f"not written: {err}"
        return details

    return wrapped
