"""The tuned runtime: what made the project's runtime faster than the plain export, one measured step each.

Steps (notebook 07 measures each against the one before; tests check each keeps the tokens of the eval set
on tiny and on the trained hsk-enzh, the condition for keeping it):
1. `fold_key_transposes`: torch.export decomposes attention's `K^T` into Reshape(3-D) -> Transpose -> Reshape
   (4-D), which ORT cannot fuse into its MatMul, so every decoding step transposes the whole self- and
   cross-attention key cache (114 ms of a 970 ms batch-8 beam-4 decode at opus-mt scale). A single 4-D
   Transpose of the last two axes is fused by ORT into FusedMatMul(transB=1): the copy disappears.
2. Beam search screens candidates instead of scoring every continuation (runtime/decoding.py).
3. Lean layout: decoder_cross_kv.onnx, extracted from decoder_model, computes the cross-attention K/V once per
   sentence, and decoder_with_past runs every step from an empty past: decoder_model, a second full copy of
   the decoder weights, is never loaded; beam search runs the first step on one row per sentence, since every
   beam starts from the same state (runtime/sessions.py).
4. Tuned step (step_rewrite.py, the "tuned" layout): decoder_with_past_tuned.onnx reads the self-attention key
   cache in place from a time-major buffer instead of concatenating it every step, and computes cross-attention
   on one copy of each sentence's K/V for all its beams; bit-identical logits.
5. ORT's SkipLayerNormFusion off (runtime/sessions.py): kept for fp32 only; on int8 it changed 4 of 56
   greedy translations of hsk-enzh, so the int8 runtime keeps ORT's default.
6. Weights in one mapped file (weightfile.py): the tied embedding table is stored once and memory-mapped by
   ORT instead of copied into each session; the same bytes, so the same tokens. Memory, not speed: notebook 07
   measures it as resident memory after load, not in the timed ablation.
The graph rewrites are ours because no library pass matches torch.export's pattern: onnxruntime.transformers'
fusions target TorchScript exports (notebook 06 found only SkipLayerNormalization fused).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import onnx.utils
from onnx import helper

from mtonnx import step_rewrite
from mtonnx.runtime.sessions import FP32_SESSION, INT8_SESSION  # the tuned runtime's session settings

Transform = Callable[[Path, Path], dict[str, Any]]


def fold_key_transposes(model: onnx.ModelProto) -> int:
    """Replace Reshape(x, 3-D) -> Transpose(perm 0,2,1) -> Reshape(4-D) by Transpose(x, perm 0,1,3,2);
    returns how many were folded (dead shape computations are pruned)."""
    graph = model.graph
    by_input, producers = step_rewrite.consumers_and_producers(graph)
    folded = 0
    for transpose in [n for n in graph.node if n.op_type == "Transpose"]:
        perm = next((list(helper.get_attribute_value(a)) for a in transpose.attribute if a.name == "perm"), None)
        flatten = producers.get(transpose.input[0])
        after = by_input.get(transpose.output[0], [])
        if (perm != [0, 2, 1] or flatten is None or flatten.op_type != "Reshape" or len(after) != 1
                or after[0].op_type != "Reshape"):
            continue
        unflatten = after[0]
        folded_node = helper.make_node("Transpose", [flatten.input[0]], [unflatten.output[0]],
                                       name=f"{transpose.name}_folded", perm=[0, 1, 3, 2])
        graph.node.insert(list(graph.node).index(unflatten), folded_node)
        graph.node.remove(unflatten)
        graph.node.remove(transpose)
        folded += 1
    step_rewrite.prune(model)
    return folded


def folded(then: Transform | None = None) -> Transform:
    """A variant transform: fold the key transposes, then apply `then` (e.g. dynamic int8) if given."""
    def transform(src: Path, dst: Path) -> dict[str, Any]:
        model = onnx.load(str(src))
        count = fold_key_transposes(model)
        if then is None:
            onnx.save(model, str(dst))
            return {"folded_key_transposes": count}
        with tempfile.TemporaryDirectory() as work:
            staged = Path(work) / src.name  # same file name: transforms may key their data by it
            onnx.save(model, str(staged))
            return {"folded_key_transposes": count, **then(staged, dst)}

    return transform


CROSS_KV = "decoder_cross_kv.onnx"


def extract_cross_kv(decoder_model: Path, out: Path) -> dict[str, Any]:
    """The part of decoder_model that turns the encoder output into every layer's cross-attention K/V, as its
    own small file (the lean layout runs it once per sentence and never loads decoder_model)."""
    model = onnx.load(str(decoder_model))
    outputs = [o.name for o in model.graph.output if ".encoder." in o.name]
    sub = onnx.utils.Extractor(model).extract_model(["encoder_hidden_states"], outputs)
    # The K/V reshapes read the batch size from Shape(input_ids) (= [batch, 1], maybe sliced by start/end
    # attributes): build the same values from the encoder output's shape.
    for node in [n for n in sub.graph.node if "input_ids" in n.input]:
        if node.op_type != "Shape":
            raise ValueError(f"{decoder_model}: cross K/V depend on input_ids through {node.op_type} {node.name}")
        bounds = {a.name: a.i for a in node.attribute}
        wanted = ["batch", "one"][bounds.get("start", 0) : bounds.get("end", 2)]
        parts = []
        for item in wanted:
            name = f"{node.output[0]}_{item}"
            parts.append(name)
            sub.graph.node.insert(0, helper.make_node("Shape", ["encoder_hidden_states"], [name], end=1)
                                  if item == "batch" else helper.make_node("Constant", [], [name], value_ints=[1]))
        index = list(sub.graph.node).index(node)
        sub.graph.node.remove(node)
        sub.graph.node.insert(index, helper.make_node("Concat", parts, list(node.output), axis=0))
    onnx.save(sub, str(out))
    return {"cross_kv_nodes": len(sub.graph.node), "cross_kv_mb": round(out.stat().st_size / 2**20, 3)}


def with_cross_kv(transform: Transform) -> Transform:
    """`transform`, plus decoder_cross_kv.onnx extracted from the transformed decoder_model next to it
    (torch.export's graphs only; the runtime falls back to the split layout without it)."""
    def wrapped(src: Path, dst: Path) -> dict[str, Any]:
        details = transform(src, dst)
        if src.name == "decoder_model.onnx":
            try:
                details.update(extract_cross_kv(dst, dst.parent / CROSS_KV))
            except ValueError as err:  # e.g. a TorchScript export: its K/V reshapes read the decoder's hidden states
                details["cross_kv"] = f"not extracted (no lean layout): {err}"
        return details

    return wrapped


def with_tuned_step(transform: Transform) -> Transform:
    """`transform`, plus decoder_with_past_tuned.onnx (`step_rewrite.tuned_step`) next to the transformed
    decoder_with_past_model.onnx (a graph whose attention does not match is left without one)."""
    def wrapped(src: Path, dst: Path) -> dict[str, Any]:
        details = transform(src, dst)
        if src.name == "decoder_with_past_model.onnx":
            model = onnx.load(str(dst))
            try:
                details["tuned_step"] = step_rewrite.tuned_step(model)
                onnx.save(model, str(dst.parent / step_rewrite.TUNED_STEP))
            except ValueError as err:
                details["tuned_step"] = f"not written: {err}"
        return details

    return wrapped


def build_tuned(fp32_dir: str | Path, work_dir: str | Path) -> dict[str, str]:
    """`variants/fp32-tuned` and `variants/int8-tuned` (folded, then notebook 06's int8 recipe; each with the
    lean layouts' decoder_cross_kv.onnx and decoder_with_past_tuned.onnx, its weights in one mapped file), if
    missing or built before the tuned step existed."""
    from mtonnx import quantize, weightfile

    work = Path(work_dir)
    built = {"fp32-tuned": str(work / "variants" / "fp32-tuned"), "int8-tuned": str(work / "variants" / "int8-tuned")}
    for name, then in (("fp32-tuned", None), ("int8-tuned", quantize.dynamic_int8())):
        manifest = Path(built[name]) / quantize.MANIFEST
        recipe = json.loads(manifest.read_text(encoding="utf-8"))["recipe"] if manifest.is_file() else {}
        if not (recipe.get("tuned_step") and (Path(built[name]) / weightfile.WEIGHTS).is_file()):
            quantize.build_variant(name, fp32_dir, built[name], with_tuned_step(with_cross_kv(folded(then))),
                                   {"name": name, "fold": True, "weights_file": True, "tuned_step": True},
                                   finalize=weightfile.externalize)
    return built


@dataclass(frozen=True)
class Step:
    """One row of notebook 07's ablation: a variant directory, a layout, session settings, screening."""

    label: str
    variant: str
    layout: str
    session: dict[str, Any]
    screen: bool
    kept: bool  # part of the project's int8 runtime (False: measured, rejected)


# Each step adds one change to the step before.
STEPS = (
    Step("int8 as notebook 06 builds it", "int8", "split", INT8_SESSION, False, True),
    Step("+ key transposes folded", "int8-tuned", "split", INT8_SESSION, False, True),
    Step("+ screened beam candidates", "int8-tuned", "split", INT8_SESSION, True, True),
    Step("+ lean layout (no decoder_model)", "int8-tuned", "lean", INT8_SESSION, True, True),
    Step("+ tuned step (keys in place, cross-attention per sentence)", "int8-tuned", "tuned", INT8_SESSION, True, True),
    Step("+ SkipLayerNormFusion off", "int8-tuned", "tuned", FP32_SESSION, True, False),
)


def ablation(dirs: dict[str, str], rows: list[list[int]], configs: list[tuple[int, int]], tokens: int,
             warmup: int = 1, repeats: int = 5, threads: int = 1) -> list[dict[str, Any]]:
    """Median ms of each STEPS entry per (batch, beams) config, repetitions interleaved; speedup against the
    first step and against the step before, and whether the tokens equal the step before's. Always one
    untimed run per step (its tokens are the ones compared)."""
    from mtonnx.runtime import SessionSettings, Translator
    from mtonnx.runtime.tokenizer import pad

    translators = [Translator(dirs[step.variant], decoder=step.layout,
                              session=SessionSettings(threads=threads, **step.session)) for step in STEPS]
    results = []
    for batch, beams in configs:
        ids, mask = pad((rows * batch)[:batch], translators[0].tokenizer.pad_token_id)

        def run(step: int) -> list[list[int]]:
            return translators[step].generate(ids, mask, num_beams=beams, max_new_tokens=tokens,
                                              min_length=tokens + 1, screen_candidates=STEPS[step].screen)

        outputs = [run(step) for step in range(len(STEPS))]  # the first warm-up run; its tokens are compared
        for _ in range(warmup - 1):
            for step in range(len(STEPS)):
                run(step)
        times: list[list[float]] = [[] for _ in STEPS]
        for _ in range(repeats):
            for step in range(len(STEPS)):
                start = time.perf_counter()
                run(step)
                times[step].append((time.perf_counter() - start) * 1000)
        medians = [float(np.median(t)) for t in times]
        for step, entry in enumerate(STEPS):
            previous = max(step - 1, 0)
            results.append({"step": entry.label, "variant": entry.variant, "layout": entry.layout, "kept": entry.kept,
                            "batch": batch, "beams": beams,
                            "tokens": tokens, "median_ms": round(medians[step], 2), "min_ms": round(min(times[step]), 2),
                            "max_ms": round(max(times[step]), 2), "speedup": round(medians[0] / medians[step], 2),
                            "speedup_vs_previous": round(medians[previous] / medians[step], 2),
                            "same_tokens_as_previous": outputs[step] == outputs[previous]})
    return results


# What each step did to resident memory after load (lean comes after the mapped file here: the split layout
# shows the file's effect alone).
MEMORY_STEPS = (("int8 as notebook 06 builds it", "int8", "split"),
                ("+ weights in one mapped file", "int8-tuned", "split"),
                ("+ lean layout (no decoder_model)", "int8-tuned", "lean"),
                ("+ tuned step (keys in place, cross-attention per sentence)", "int8-tuned", "tuned"))


def memory_ablation(dirs: dict[str, str]) -> list[dict[str, Any]]:
    """RSS (MB) of a fresh process after loading a Translator at each MEMORY_STEPS entry (1 thread); None
    where the variant lacks the layout's files (a TorchScript export has no lean layout)."""
    from mtonnx.bench import import_cost
    from mtonnx.runtime.translator import LAYOUTS

    rows = []
    for label, variant, layout in MEMORY_STEPS:
        code = (f"from mtonnx.runtime import SessionSettings, Translator\n"
                f"Translator({dirs[variant]!r}, decoder={layout!r}, session=SessionSettings(threads=1))")
        present = all((Path(dirs[variant]) / f).is_file() for f in LAYOUTS[layout])
        rows.append({"step": label, "variant": variant, "layout": layout,
                     "rss_mb": import_cost(code, repeats=1)["rss_mb"] if present else None})
    return rows
