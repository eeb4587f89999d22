"""Pitfalls from the field, reproduced on the current model: each function shows the failure as data."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from mtonnx.check.parity import session
from mtonnx.export.manual import error_summary, export_subgraph, load_for_export
from mtonnx.export.samples import EXPORT_CASE, SampleInputs
from mtonnx.export.wrappers import decoder_layers, subgraphs
from mtonnx.measure.timing import interleaved
from mtonnx.params import DEFAULT_EXPORTER, DEFAULT_OPSET, EXPORTERS
from mtonnx.runtime import layout


def static_axes(
    model, work_dir: str | Path, exporter: str = DEFAULT_EXPORTER, opset: int = DEFAULT_OPSET, run_length: int = 12
) -> dict[str, Any]:
    """Export the encoder without dynamic axes, then feed it a sentence of another length."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    encoder = subgraphs(decoder_layers(model))[0]
    spec = dataclasses.replace(encoder, dynamic_axes={name: {} for name in encoder.inputs})
    sample = SampleInputs(model, EXPORT_CASE)
    path = work_dir / "encoder_static.onnx"
    export_subgraph(model, spec, sample, path, exporter, opset)
    encoder_session = session(path)
    ids = np.full((1, run_length), 5, dtype=np.int64)
    try:
        encoder_session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        error = None
    except Exception as err:  # the point of the demonstration: ORT rejects the other length
        error = f"{type(err).__name__}: {' '.join(str(err).split())}"
    return {
        "exported_input_shape": list(sample.input_ids.shape),
        "session_input_shapes": {i.name: i.shape for i in encoder_session.get_inputs()},
        "ran_input_shape": list(ids.shape),
        "error": error,
    }


def compare_settings(translator, sentences: list[str], max_new_tokens: int = 24, **wrong) -> dict[str, Any]:
    """Greedy decoding with the model's settings vs with `wrong` overrides (another start token, no bad words)."""
    ids, mask = translator.tokenizer.batch(sentences)
    right = translator.generate(ids, mask, num_beams=1, max_new_tokens=max_new_tokens)
    bad = translator.generate(ids, mask, num_beams=1, max_new_tokens=max_new_tokens, **wrong)
    pad, eos = translator.settings.pad_token_id, translator.settings.eos_token_id
    return {
        "right": [translator.tokenizer.decode(r) for r in right],
        "wrong": [translator.tokenizer.decode(w) for w in bad],
        "changed": float(np.mean([r != w for r, w in zip(right, bad)])),
        "pad_chosen_right": sum(_chosen_pads(r, pad, eos) for r in right),
        "pad_chosen_wrong": sum(_chosen_pads(w, pad, eos) for w in bad),
    }


def _chosen_pads(row: list[int], pad: int, eos: int) -> int:
    """Pad tokens the model chose before eos (not the filler of finished rows)."""
    end = row.index(eos) if eos in row else len(row)
    return row[:end].count(pad)


def int32_ids(translator, sentence: str) -> dict[str, Any]:
    """Feed int32 ids (what many tokenizer front-ends produce) to the int64 graph, then the fix: cast."""
    ids, mask = translator.tokenizer.batch([sentence])
    encoder = translator.sessions[layout.ENCODER]
    try:
        encoder.run(None, {"input_ids": ids.astype(np.int32), "attention_mask": mask.astype(np.int32)})
        error = None
    except Exception as err:  # the ORT type error is the demonstration
        error = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
    fixed = encoder.run(None, {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)})[0]
    return {"error": error, "fixed_output_shape": list(fixed.shape)}


def whole_prefix_to_decoder_with_past(translator, sentence: str, steps: int = 3) -> dict[str, Any]:
    """Feed the whole generated prefix (not only the new token) to decoder_with_past after a few steps."""
    ids, mask = translator.tokenizer.batch([sentence])
    run = translator.decoder.begin(ids, mask)
    token = np.array([translator.settings.decoder_start_token_id])
    prefix = [int(token[0])]
    for _ in range(steps):
        token = run.step(token).argmax(-1)
        prefix.append(int(token[0]))
    feeds = {
        "input_ids": np.array([prefix], dtype=np.int64),
        "encoder_attention_mask": mask,
        **dict(zip(layout.past_names(run.cache.layers), run.cache.tensors())),
    }
    try:
        logits = translator.sessions[layout.DECODER_WITH_PAST].run(["logits"], feeds)[0]
        return {
            "error": None,
            "logits_shape": list(logits.shape),
            "note": "accepted: the graph takes several tokens, but positions and cache are now wrong",
        }
    except Exception as err:  # a graph with a fixed new-token axis refuses the prefix
        return {"error": f"{type(err).__name__}: {' '.join(str(err).split())[:300]}", "prefix_length": len(prefix)}


def ignored_padding_mask(translator, sentences: list[str], max_new_tokens: int = 24) -> dict[str, Any]:
    """Decode a padded batch with an all-ones mask (padding attended to) vs the real mask."""
    ids, mask = translator.tokenizer.batch(sentences)
    right = translator.generate(ids, mask, num_beams=1, max_new_tokens=max_new_tokens)
    wrong = translator.generate(ids, np.ones_like(mask), num_beams=1, max_new_tokens=max_new_tokens)
    padded = mask.sum(axis=1) < mask.shape[1]
    return {
        "padded_rows": int(padded.sum()),
        "changed_padded_rows": int(sum(r != w for r, w, p in zip(right, wrong, padded) if p)),
        "changed_unpadded_rows": int(sum(r != w for r, w, p in zip(right, wrong, padded) if not p)),
    }


def special_tokens_in_output(tokenizer, ids: list[int]) -> dict[str, str]:
    """Decoding generated ids with and without skip_special_tokens (MarianTokenizer)."""
    return {
        "skip_special_tokens=False": tokenizer.decode(ids, skip_special_tokens=False),
        "skip_special_tokens=True": tokenizer.decode(ids, skip_special_tokens=True),
    }


def fp16_mask_overflow(export_dir: str | Path) -> dict[str, Any]:
    """The fp32 graph's large negative mask constants, and what they become in float16 (and softmax of them)."""
    from onnx import numpy_helper

    from mtonnx.passes.graph import constant_tensors

    model = onnx.load(str(Path(export_dir) / layout.DECODER))
    values = [numpy_helper.to_array(t) for t in constant_tensors(model) if numpy_helper.to_array(t).size == 1]
    floats = [float(v) for v in values if v.dtype == np.float32]
    most_negative = min(floats) if floats else float(np.finfo(np.float32).min)
    with np.errstate(over="ignore"):
        as_half = np.float16(most_negative)  # overflows to -inf: that is the pitfall
    row = np.array([as_half, as_half], dtype=np.float16)
    with np.errstate(invalid="ignore"):
        softmax = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
    return {
        "most_negative_fp32_constant": most_negative,
        "in_float16": float(as_half),
        "softmax_of_a_fully_masked_row_fp16": softmax.tolist(),
    }


def training_mode_export(model_dir: str | Path, work_dir: str | Path, opset: int = DEFAULT_OPSET) -> dict[str, Any]:
    """Export the encoder from a model left in training mode (bypassing the project's refusal), per exporter:
    the exporter's error, or whether two runs of the file on the same input agree (dropout makes them differ)."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    model = load_for_export(model_dir)
    spec = subgraphs(decoder_layers(model))[0]
    sample = SampleInputs(model, EXPORT_CASE)
    model.train()
    out = {}
    for exporter in EXPORTERS:
        path = work_dir / f"encoder_train_{exporter}.onnx"
        try:
            export_subgraph(model, spec, sample, path, exporter, opset)
        except Exception as err:  # the exporter's refusal is one possible outcome
            out[exporter] = {"error": error_summary(err)}
            continue
        trained = session(path)
        feeds = {"input_ids": sample.input_ids.numpy(), "attention_mask": sample.attention_mask.numpy()}
        first, second = trained.run(None, feeds)[0], trained.run(None, feeds)[0]
        ops = {n.op_type for n in onnx.load(str(path)).graph.node}
        out[exporter] = {
            "error": None,
            "dropout_ops": sorted(ops & {"Dropout", "RandomUniformLike", "Bernoulli"}),
            "two_runs_identical": bool(np.array_equal(first, second)),
        }
    return out


def padding_strategies(translator, sentences: list[str], length: int = 64, max_new_tokens: int = 16) -> dict[str, Any]:
    """padding=True (longest in batch) vs padding to a fixed max_length (`length`, or the longest sentence when that
    is longer, as the tokenizer would cut nothing), with the mask: same ids, more work."""
    from mtonnx.runtime.tokenizer import pad

    rows = [translator.tokenizer.encode(s) for s in sentences]
    length = max(length, *(len(r) for r in rows))
    longest = pad(rows, translator.tokenizer.pad_token_id)
    fixed = pad(
        [r + [translator.tokenizer.pad_token_id] * (length - len(r)) for r in rows], translator.tokenizer.pad_token_id
    )
    fixed = (fixed[0], (np.arange(length)[None, :] < np.array([len(r) for r in rows])[:, None]).astype(np.int64))
    inputs = {"padding=True": longest, f"padding='max_length' ({length})": fixed}
    timed = interleaved(
        {
            name: functools.partial(translator.generate, ids, mask, num_beams=1, max_new_tokens=max_new_tokens)
            for name, (ids, mask) in inputs.items()
        },
        warmup=0,
        repeats=1,
    )
    first, second = (t["result"] for t in timed.values())
    return {
        "source_width": {k: v for k, v in zip(inputs, (longest[0].shape[1], length))},
        "ms": {name: t["median_ms"] for name, t in timed.items()},
        "identical_outputs": first == second,
    }


def source_prefix_effect(translator, sentence: str, prefix: str) -> dict[str, Any]:
    """Token ids and translation with and without the text a published checkpoint expects in front of a source
    (runtime.families: opus-mt-en-zh's target-language token, T5's task prefix)."""
    with_prefix, without = translator.tokenizer.encode(f"{prefix} {sentence}"), translator.tokenizer.encode(sentence)
    return {
        "ids_without": without,
        "ids_with": with_prefix,
        "prefix_ids": translator.tokenizer.encode(prefix)[:-1],  # without eos
        "translation_without": translator.translate([sentence], max_new_tokens=24)[0],
        "translation_with": translator.translate([sentence], source_prefix=prefix, max_new_tokens=24)[0],
    }


def other_start_token(settings) -> int:
    """A wrong decoder start token for these settings: eos where decoding starts from another token, else pad."""
    start = settings.decoder_start_token_id
    return settings.eos_token_id if start != settings.eos_token_id else settings.pad_token_id
