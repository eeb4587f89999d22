"""Quantized and converted variants of an fp32 export, each a directory the runtime loads as is.

Recipes (CTranslate2-style: load -> transform -> save, one small step each):
- `fp32`: the export, copied (the baseline);
- `fp32-ortopt`: onnxruntime.transformers' optimizer (model_type "bart"), fused nodes counted;
- `int8-naive`: `quantize_dynamic` exactly as the seeds call it;
- `int8`: the recipe that works on Marian: the tied lm_head's `Transpose(shared embedding)` is first
  materialized as its own initializer so its MatMul becomes integer, and only MatMuls are quantized
  (embeddings and the sinusoidal position table stay fp32); per-channel and "embeddings too" are options;
- `int8-static`: QDQ static quantization of the weight MatMuls, calibrated on encoder inputs from the
  calibration split and decoder inputs captured from the fp32 decoding loop;
- `fp16`: float16 weights with fp32 inputs/outputs (keep_io_types).
Every variant writes `variant_manifest.json` (recipe, sizes, versions).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from mtonnx.export import MODEL_FILES, replace_dir

FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
MANIFEST = "variant_manifest.json"
# Sensitivity groups: module paths (from node scopes) of the weight MatMuls / Gathers in each group.
GROUPS = {
    "embeddings": r"embed_tokens|embed_positions|^shared|^lm_head$",  # the Gathers (with op_types Gather)
    "encoder": r"^encoder\.layers",
    "self-attention": r"^decoder\.layers\.\d+\.self_attn\.",
    "cross-attention": r"^decoder\.layers\.\d+\.encoder_attn\.",
    "decoder FFN": r"^decoder\.layers\.\d+\.fc[12]",
    "lm_head": r"^lm_head",
}


def node_scope(node: onnx.NodeProto) -> str:
    """The module path a node came from: torch.export's name-scope metadata, or a TorchScript node name."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = [s for s in json.loads(prop.value.replace("'", '"')) if s]
            return max(scopes[:-1] or scopes, key=len) if scopes else ""
    parts = node.name.strip("/").split("/")
    parts = parts[1:] if parts and parts[0] == "model" else parts
    return ".".join(parts[:-1])


def weight_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """MatMul nodes whose second input is a constant weight (the ones quantization can make integer)."""
    constants = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in constants]


def untie_lm_head(model: onnx.ModelProto) -> int:
    """Replace MatMul(x, Transpose(W)) by MatMul(x, W_T) with W_T a new initializer; returns how many."""
    inits = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, int] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers[i] = consumers.get(i, 0) + 1
    changed = 0
    for node in [n for n in model.graph.node if n.op_type == "MatMul"]:
        transpose = producers.get(node.input[1])
        if transpose is None or transpose.op_type != "Transpose" or transpose.input[0] not in inits:
            continue
        weight = numpy_helper.to_array(inits[transpose.input[0]])
        if weight.ndim != 2:
            continue
        name = f"{transpose.input[0]}_transposed"
        if name not in inits:
            inits[name] = numpy_helper.from_array(np.ascontiguousarray(weight.T), name)
            model.graph.initializer.append(inits[name])
        node.input[1] = name
        consumers[transpose.output[0]] -= 1
        if consumers[transpose.output[0]] == 0:
            model.graph.node.remove(transpose)
        changed += 1
    return changed


def lm_head_report(path: str | Path) -> dict[str, Any]:
    """How the decoder computes its logits: the op of the lm_head product, and whether the whole embedding
    table is dequantized to feed it (the naive int8 pitfall: a 65001 x 512 dequantize every step)."""
    model = onnx.load(str(path))
    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    vocab = max((d[0] for d in inits.values() if len(d) == 2), default=0)
    logits = next(n for n in model.graph.node if "logits" in n.output)
    node = logits
    while node is not None and node.op_type not in ("MatMul", "MatMulInteger", "DynamicQuantizeMatMul", "Gemm"):
        node = next((producers.get(i) for i in node.input if producers.get(i) is not None), None)
    chain, feeding = [], producers.get(node.input[1]) if node is not None else None
    while feeding is not None and len(chain) < 4:
        chain.append(feeding.op_type)
        feeding = producers.get(feeding.input[0])
    # DequantizeLinear straight off an int8 initializer is QDQ: ORT fuses it into an integer MatMul at load.
    # Anything computed between the table and the DequantizeLinear/MatMul (a Transpose) runs every step.
    return {"lm_head_op": node.op_type if node is not None else None, "weight_path": chain,
            "dequantizes_embedding_every_step": "DequantizeLinear" in chain and len(chain) > 1 and vocab > 0}


def build_variant(name: str, fp32_dir: str | Path, out_dir: str | Path,
                  transform: Callable[[Path, Path], dict[str, Any]], recipe: dict[str, Any],
                  finalize: Callable[[Path], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Apply `transform(src, dst)` to each runtime file into a temp dir, copy the model files, then
    `finalize(temp dir)` if given (e.g. weightfile.externalize), move into place. Sizes are the inline ones."""
    fp32_dir, out_dir = Path(fp32_dir), Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    start = time.perf_counter()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs "consider pre-processing" on the root logger per file
    try:
        details = {f: transform(fp32_dir / f, tmp / f) for f in FILES}
        for f in MODEL_FILES:
            if (fp32_dir / f).is_file():
                shutil.copy2(fp32_dir / f, tmp / f)
        manifest = {"variant": name, "recipe": recipe, "source": str(fp32_dir), "details": details,
                    "seconds": round(time.perf_counter() - start, 2),
                    "size_mb": {f: round((tmp / f).stat().st_size / 2**20, 3) for f in FILES},
                    "versions": _versions()}
        if finalize is not None:
            manifest["finalize"] = finalize(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
        replace_dir(tmp, out_dir)
    finally:
        root.setLevel(level)
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _versions() -> dict[str, str | None]:
    from mtonnx.envinfo import version_of

    return {p: version_of(p) for p in ("onnx", "onnxruntime", "torch")}


def copy_fp32(src: Path, dst: Path) -> dict[str, Any]:
    shutil.copy2(src, dst)
    return {}


def dynamic_int8(untie: bool = True, per_channel: bool = False, op_types: tuple[str, ...] = ("MatMul",),
                 groups: tuple[str, ...] | None = None, subgraphs: bool = False) -> Callable[[Path, Path], dict[str, Any]]:
    """A dynamic-quantization transform: optionally untie the lm_head, quantize `op_types` (all nodes, or
    only those of the given sensitivity `groups`), per tensor or per channel."""
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
        with tempfile.TemporaryDirectory() as work:
            staged = Path(work) / "model.onnx"
            onnx.save(model, str(staged))
            quantize_dynamic(str(staged), str(dst), op_types_to_quantize=list(op_types), per_channel=per_channel,
                             weight_type=QuantType.QInt8, nodes_to_quantize=nodes,
                             extra_options={"EnableSubgraph": subgraphs})
        integer = sum(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for n in onnx.load(str(dst)).graph.node)
        return {"untied": untied, "quantized_nodes": len(nodes) if nodes is not None else None, "integer_matmuls": integer}

    return transform


def naive_int8(src: Path, dst: Path) -> dict[str, Any]:
    """The seeds' call: quantize_dynamic(model, out, weight_type=QuantType.QInt8), nothing else."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return {}


def fp16(src: Path, dst: Path) -> dict[str, Any]:
    """float16 weights and compute, fp32 inputs and outputs (casts at the boundary)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))
    return {}


def ort_optimized(num_heads: int, hidden_size: int) -> Callable[[Path, Path], dict[str, Any]]:
    """onnxruntime.transformers.optimizer with model_type "bart"; reports which fusions it found."""
    from onnxruntime.transformers.optimizer import optimize_model

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        optimized = optimize_model(str(src), model_type="bart", num_heads=num_heads, hidden_size=hidden_size,
                                   opt_level=0, use_gpu=False)
        optimized.save_model_to_file(str(dst))
        return {"fused": {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}}

    return transform


class FeedsReader:
    """An ORT CalibrationDataReader over recorded input dicts."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]):
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def capture_feeds(fp32_dir: str | Path, sentences: list[str], max_new_tokens: int = 16,
                  batch_size: int = 8) -> dict[str, list[dict[str, np.ndarray]]]:
    """Inputs each file sees while the fp32 runtime translates `sentences` greedily: calibration data."""
    from mtonnx.runtime import Translator

    translator = Translator(fp32_dir, decoder="split")
    sessions = {"encoder_model.onnx": translator.decoder.encoder, "decoder_model.onnx": translator.decoder.first,
                "decoder_with_past_model.onnx": translator.decoder.with_past}
    recorded: dict[str, list[dict[str, np.ndarray]]] = {f: [] for f in sessions}

    class Recorder:
        def __init__(self, file, session):
            self.file, self.session = file, session

        def run(self, outputs, feeds):
            recorded[self.file].append(dict(feeds))
            return self.session.run(outputs, feeds)

        def __getattr__(self, name):
            return getattr(self.session, name)

    decoder = translator.decoder
    decoder.encoder, decoder.first, decoder.with_past = (Recorder(f, s) for f, s in sessions.items())
    translator.translate(sentences, batch_size=batch_size, num_beams=1, max_new_tokens=max_new_tokens)
    return recorded


def static_int8(feeds: dict[str, list[dict[str, np.ndarray]]], method: str = "MinMax",
                per_channel: bool = False) -> Callable[[Path, Path], dict[str, Any]]:
    """QDQ static quantization of the weight MatMuls, calibrated with recorded feeds (MinMax/Entropy/Percentile)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        model = onnx.load(str(src))
        untied = untie_lm_head(model)
        nodes = [n.name for n in weight_nodes(model)]
        with tempfile.TemporaryDirectory() as work:
            staged = Path(work) / "model.onnx"
            onnx.save(model, str(staged))
            quantize_static(str(staged), str(dst), FeedsReader(feeds[src.name]), quant_format=QuantFormat.QDQ,
                            op_types_to_quantize=["MatMul"], nodes_to_quantize=nodes, per_channel=per_channel,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            calibrate_method=getattr(CalibrationMethod, method),
                            extra_options={"ActivationSymmetric": True})
        return {"untied": untied, "quantized_nodes": len(nodes), "calibration_batches": len(feeds[src.name])}

    return transform


def per_file(encoder: Callable[[Path, Path], dict], decoders: Callable[[Path, Path], dict]) -> Callable[[Path, Path], dict]:
    """One transform for the encoder, another for the two decoder files (e.g. static encoder, dynamic decoder)."""
    def transform(src: Path, dst: Path) -> dict[str, Any]:
        return (encoder if src.name == "encoder_model.onnx" else decoders)(src, dst)

    return transform


def ort_fusions(path: str | Path) -> dict[str, Any]:
    """What ONNX Runtime's own load-time optimizer (ORT_ENABLE_ALL) does to a file: op counts before/after."""
    import onnxruntime as ort
    from collections import Counter

    with tempfile.TemporaryDirectory() as work:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the "hardware specific optimizations" notice is expected here
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(work) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        after = Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    before = Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    return {"nodes_before": sum(before.values()), "nodes_after": sum(after.values()),
            "new_ops": {op: n for op, n in after.items() if op not in before}}


def merged_decoder_sizes(merged_path: str | Path, work_dir: str | Path) -> dict[str, float]:
    """quantize_dynamic on optimum's merged decoder with and without EnableSubgraph: MB of each result."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    sizes = {"fp32": Path(merged_path).stat().st_size}
    for label, subgraphs in (("int8 default", False), ("int8 EnableSubgraph", True)):
        out = work_dir / f"merged-{'sub' if subgraphs else 'default'}.onnx"
        quantize_dynamic(str(merged_path), str(out), weight_type=QuantType.QInt8,
                         extra_options={"EnableSubgraph": subgraphs})
        sizes[label] = out.stat().st_size
    return {k: round(v / 2**20, 3) for k, v in sizes.items()}


def finite_outputs(variant_dir: str | Path, sources: list[str], max_new_tokens: int = 8) -> bool:
    """True when the variant's encoder output and first-step logits have no NaN or inf (fp16 overflow check)."""
    from mtonnx.runtime import Translator

    translator = Translator(variant_dir, decoder="split")
    ids, mask = translator.tokenizer.batch(sources)
    run = translator.decoder.begin(ids, mask)
    logits = run.step(np.full(len(sources), translator.settings.decoder_start_token_id))
    return bool(np.isfinite(run.hidden).all() and np.isfinite(logits).all())
