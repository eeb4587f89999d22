"""`mtonnx doctor`: check an export directory against its source model and say what is wrong and how to fix it.

Each check returns (status, evidence, fix) with status ok / warn / fail; any fail makes the command exit 1.
It works on the hand export, optimum's export and any quantized variant: numerical checks are strict for fp32
files and informative (warn) for quantized or fp16 ones, whose outputs are expected to move.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import onnx

from mtonnx.runtime import layout

RUNTIME_FILES = layout.VARIANT_FILES
QUANTIZED_OPS = {"MatMulInteger", "DynamicQuantizeMatMul", "QuantizeLinear", "DequantizeLinear", "QLinearMatMul"}
TRAINING_OPS = {"Dropout", "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli"}


@dataclass
class Check:
    """One row of the doctor's table."""

    check: str
    status: str
    evidence: str
    fix: str = ""


def _graphs(onnx_dir: Path) -> dict[str, onnx.ModelProto]:
    return {f: onnx.load(str(onnx_dir / f)) for f in RUNTIME_FILES if (onnx_dir / f).is_file()}


def _ops(model: onnx.ModelProto) -> set[str]:
    ops = set()
    for node in model.graph.node:
        ops.add(node.op_type)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                ops |= {n.op_type for n in attribute.g.node}
    return ops


def precision(graphs: dict[str, onnx.ModelProto]) -> str:
    """fp32, int8 (any quantized op) or fp16 (float16 weights)."""
    if any(_ops(g) & QUANTIZED_OPS for g in graphs.values()):
        return "int8"
    if any(i.data_type == onnx.TensorProto.FLOAT16 for g in graphs.values() for i in g.graph.initializer):
        return "fp16"
    return "fp32"


def check_files(onnx_dir: Path, **_) -> Check:
    """The three split-layout files exist and ONNX Runtime loads each."""
    missing = [f for f in RUNTIME_FILES if not (onnx_dir / f).is_file()]
    if missing:
        return Check(
            "files present and loadable",
            "fail",
            f"missing {', '.join(missing)}",
            "export encoder, decoder and decoder-with-past (mtonnx.export.manual.export_manual or optimum)",
        )
    from mtonnx.runtime.sessions import make_session

    for f in RUNTIME_FILES:
        try:
            make_session(onnx_dir / f)
        except Exception as err:  # the load error itself is the evidence
            return Check(
                "files present and loadable",
                "fail",
                f"{f}: {str(err).splitlines()[0][:200]}",
                "re-export; check onnxruntime supports the opset",
            )
    return Check("files present and loadable", "ok", ", ".join(RUNTIME_FILES))


def _dynamic_axes(file: str, name: str) -> tuple[int, ...]:
    """Axes the runtime varies at run time for each input (decoder_with_past takes exactly one new token)."""
    if name.startswith("past_key_values"):
        return (0, 2)
    if name == "input_ids" and file == layout.DECODER_WITH_PAST:
        return (0,)
    return (0, 1)


def check_inputs(graphs: dict[str, onnx.ModelProto], **_) -> Check:
    """Ids and masks are int64; batch, sequence and past dims are symbolic, not frozen."""
    problems = []
    for file, graph in graphs.items():
        for value in graph.graph.input:
            tensor = value.type.tensor_type
            if "ids" in value.name or "mask" in value.name:
                if tensor.elem_type != onnx.TensorProto.INT64:
                    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
                    problems.append(f"{file}:{value.name} is {dtype}, not int64")
            dims = [d.dim_param or d.dim_value for d in tensor.shape.dim]
            static = [
                i for i in _dynamic_axes(file, value.name) if i < len(dims) and isinstance(dims[i], int) and dims[i] > 0
            ]
            if static:
                problems.append(f"{file}:{value.name} is fixed at {[dims[i] for i in static]} on axes {static}")
    if problems:
        return Check(
            "input names, dtypes, dynamic dims",
            "fail",
            "; ".join(problems[:4]),
            "export with int64 ids and dynamic axes for batch, source/target and past length",
        )
    return Check("input names, dtypes, dynamic dims", "ok", "int64 ids; batch, sequence and past dims symbolic")


def check_opset(graphs: dict[str, onnx.ModelProto], **_) -> Check:
    """Every file has an opset of at least 14 (attention needs it)."""
    opsets = {f: next((o.version for o in g.opset_import if o.domain in ("", "ai.onnx")), 0) for f, g in graphs.items()}
    low = {f: v for f, v in opsets.items() if v < 14}
    if low:
        return Check("opset", "fail", f"{low}", "export with opset >= 14 (attention needs it)")
    return Check("opset", "ok", ", ".join(sorted({str(v) for v in opsets.values()})))


def check_generation(onnx_dir: Path, model_dir: Path, **_) -> Check:
    """The export's start, eos, pad, bad words and forced eos equal the source model's."""
    path = onnx_dir / "generation_config.json"
    if not path.is_file():
        return Check(
            "start, eos, pad, bad words",
            "fail",
            "no generation_config.json beside the ONNX files",
            "copy the source model's generation_config.json into the export directory",
        )
    exported = json.loads(path.read_text())
    source = json.loads((model_dir / "generation_config.json").read_text())
    keys = ("decoder_start_token_id", "eos_token_id", "pad_token_id", "bad_words_ids", "forced_eos_token_id")
    differ = {k: (exported.get(k), source.get(k)) for k in keys if exported.get(k) != source.get(k)}
    if differ:
        return Check(
            "start, eos, pad, bad words",
            "fail",
            "; ".join(f"{k}: export {a} vs model {b}" for k, (a, b) in differ.items()),
            "Marian starts decoding from pad (decoder_start_token_id = pad) and bans pad; use the model's config",
        )
    if source.get("decoder_start_token_id") != source.get("pad_token_id") or [source.get("pad_token_id")] not in (
        source.get("bad_words_ids") or []
    ):
        return Check(
            "start, eos, pad, bad words", "warn", "source model is not Marian-shaped (start != pad or pad not banned)"
        )
    return Check(
        "start, eos, pad, bad words",
        "ok",
        f"start = pad = {source['pad_token_id']}, eos = {source['eos_token_id']}, pad banned",
    )


def check_vocab(onnx_dir: Path, **_) -> Check:
    """vocab.json has as many entries as the logits have columns."""
    from mtonnx.runtime import ModelDirError, Translator

    try:
        Translator(onnx_dir, decoder="split")
    except ModelDirError as err:
        return Check("tokenizer vocab = logits size", "fail", str(err), "use the vocab.json of the exported model")
    return Check("tokenizer vocab = logits size", "ok", "vocab.json matches the logits dimension")


def check_training_ops(graphs: dict[str, onnx.ModelProto], **_) -> Check:
    """No dropout or random ops: the model was exported in eval mode."""
    found = {f: sorted(_ops(g) & TRAINING_OPS) for f, g in graphs.items() if _ops(g) & TRAINING_OPS}
    if found:
        return Check(
            "no dropout / training-mode ops",
            "fail",
            f"{found}",
            "call model.eval() before exporting: dropout makes outputs change from run to run",
        )
    return Check("no dropout / training-mode ops", "ok", "none")


def check_quantized_lm_head(onnx_dir: Path, graphs: dict[str, onnx.ModelProto], **_) -> Check:
    """An int8 decoder computes its logits with an integer MatMul, never dequantizing the table."""
    from mtonnx.passes.lm_head import lm_head_report

    if precision(graphs) != "int8":
        return Check("int8: integer lm_head, no per-step dequantize", "ok", "not quantized")
    reports = {f: lm_head_report(onnx_dir / f) for f in RUNTIME_FILES if f != layout.ENCODER}
    bad = [f for f, r in reports.items() if r["dequantizes_embedding_every_step"]]
    if bad:
        return Check(
            "int8: integer lm_head, no per-step dequantize",
            "fail",
            f"{', '.join(bad)}: lm_head MatMul is fp32 fed by {reports[bad[0]]['weight_path']}",
            "materialize the transposed embedding before quantize_dynamic (mtonnx.passes.lm_head.untie_lm_head)",
        )
    return Check(
        "int8: integer lm_head, no per-step dequantize",
        "ok",
        ", ".join(sorted({r["lm_head_op"] for r in reports.values()})),
    )


def check_merged(onnx_dir: Path, graphs: dict[str, onnx.ModelProto], **_) -> Check:
    """A merged decoder is quantized like the split files (its If subgraphs too)."""
    merged = onnx_dir / layout.DECODER_MERGED
    if not merged.is_file():
        return Check("merged decoder quantized like the rest", "ok", "no merged decoder")
    if precision(graphs) == "int8" and not (_ops(onnx.load(str(merged))) & QUANTIZED_OPS):
        return Check(
            "merged decoder quantized like the rest",
            "fail",
            "split files are int8, merged decoder is fp32",
            "quantize_dynamic(..., extra_options={'EnableSubgraph': True})",
        )
    return Check("merged decoder quantized like the rest", "ok", "consistent")


def check_parity(onnx_dir: Path, model, graphs: dict[str, onnx.ModelProto], tolerance: float, **_) -> Check:
    """Every output within `tolerance` of PyTorch at two unseen shapes (a warning for int8/fp16)."""
    from mtonnx.check.parity import CASES, file_parity

    result = file_parity(model, onnx_dir, tolerance=tolerance, cases=CASES[:2], files=list(RUNTIME_FILES))
    worst = max(f["max_abs_diff"] for f in result["files"].values())
    if result["pass"]:
        return Check("logits parity at two shapes", "ok", f"max |diff| {worst:.1e} <= {tolerance}")
    kind = precision(graphs)
    status = "warn" if kind != "fp32" else "fail"
    return Check(
        "logits parity at two shapes",
        status,
        f"max |diff| {worst:.2e} > {tolerance} ({kind})",
        "" if status == "warn" else "re-export in eval mode with final_logits_bias; check the wrappers",
    )


def check_greedy(
    onnx_dir: Path, model, tokenizer, graphs: dict[str, onnx.ModelProto], sentences: list[str], **_
) -> Check:
    """Greedy tokens over the export equal PyTorch generate's on a few sentences."""
    from mtonnx.check.parity import runtime_parity
    from mtonnx.runtime import Translator

    try:
        result = runtime_parity(
            Translator(onnx_dir, decoder="split"),
            model,
            tokenizer,
            sentences,
            num_beams=1,
            batch_size=len(sentences),
            max_new_tokens=16,
        )
    except Exception as err:  # e.g. int32 inputs: the runtime's int64 feeds are rejected
        return Check(
            "greedy tokens = generate",
            "fail",
            f"{type(err).__name__}: {str(err).splitlines()[0][:160]}",
            "the export must accept the runtime's int64 ids and return logits + present K/V",
        )
    if result["match"] == 1.0:
        return Check("greedy tokens = generate", "ok", f"{result['sentences']} sentences token-identical")
    status = "warn" if precision(graphs) != "fp32" else "fail"
    return Check(
        "greedy tokens = generate",
        status,
        f"{result['match']:.0%} of {result['sentences']} identical",
        "" if status == "warn" else "check start token, bad words and the cache wiring",
    )


CHECKS: list[Callable[..., Check]] = [
    check_files,
    check_inputs,
    check_opset,
    check_generation,
    check_vocab,
    check_training_ops,
    check_quantized_lm_head,
    check_merged,
    check_parity,
    check_greedy,
]


def diagnose(
    model_dir: str | Path, onnx_dir: str | Path, tolerance: float = 1e-4, sentences: list[str] | None = None
) -> list[dict[str, Any]]:
    """Run every check (stopping after a failed file check); returns the rows."""
    from mtonnx import data
    from mtonnx.sources.models import load_pretrained

    model_dir, onnx_dir = Path(model_dir), Path(onnx_dir)
    first = check_files(onnx_dir)
    if first.status == "fail":
        return [asdict(first)]
    model, tokenizer = load_pretrained(model_dir)
    sentences = sentences or [p.en for p in data.eval_set({"hsk_size": 3, "techdocs_size": 2, "eval_split": "test"})]
    context = dict(
        onnx_dir=onnx_dir,
        model_dir=model_dir,
        model=model,
        tokenizer=tokenizer,
        graphs=_graphs(onnx_dir),
        tolerance=tolerance,
        sentences=sentences,
    )
    rows = [first]
    for check in CHECKS[1:]:
        try:
            rows.append(check(**context))
        except Exception as err:  # a check that cannot even run is itself a finding
            rows.append(Check(check.__name__.removeprefix("check_"), "fail", f"{type(err).__name__}: {str(err)[:160]}"))
    return [asdict(r) for r in rows]


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table for the terminal."""
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in ("check", "status")}
    lines = [f"{'check':<{widths['check']}}  {'status':<{widths['status']}}  evidence / fix"]
    for r in rows:
        lines.append(f"{r['check']:<{widths['check']}}  {r['status']:<{widths['status']}}  {r['evidence']}")
        if r["fix"] and r["status"] != "ok":
            lines.append(f"{'':<{widths['check']}}  {'':<{widths['status']}}  fix: {r['fix']}")
    return "\n".join(lines)
