"""Export a Marian model by hand with `torch.onnx.export`: four subgraphs, described declaratively.

One `Subgraph` per file (wrapper module, input/output names, dynamic axes, sample inputs) drives one
generic export step, in the style of optimum's exporters. Past/present names follow optimum's
convention (`past_key_values.{i}.decoder.key`, `present.{i}.encoder.value`) so one runtime loads either
export. The files are written to a temp dir, checked, and moved into place only when all succeeded.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from transformers.cache_utils import EncoderDecoderCache

EXPORTERS = ("torchscript", "dynamo")
# Opsets each exporter writes correctly in torch 2.13 and ONNX Runtime 1.32 runs (SDPA needs 14; the dynamo
# exporter builds at 18 and silently keeps 18 when asked for 14).
OPSETS = {"torchscript": range(14, 21), "dynamo": range(18, 24)}
DEFAULT_OPSET = 18
MANIFEST = "export_manifest.json"
# Copied next to the ONNX files so an export directory is all the runtime needs (as optimum does).
MODEL_FILES = ("config.json", "generation_config.json", "source.spm", "target.spm", "vocab.json",
               "tokenizer_config.json", "special_tokens_map.json")
KV = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")  # legacy cache order per layer


class ExportError(RuntimeError):
    """An export that cannot be done as asked; str() says why and what to do."""


class EncoderModel(nn.Module):
    """(input_ids, attention_mask) -> last_hidden_state. Runs once per sentence."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids, attention_mask):
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class _LogitsHead(nn.Module):
    """lm_head plus final_logits_bias: what MarianMTModel adds after the decoder."""

    def __init__(self, model):
        super().__init__()
        self.decoder = model.get_decoder()
        self.lm_head = model.lm_head
        self.register_buffer("final_logits_bias", model.final_logits_bias, persistent=False)

    def logits(self, hidden):
        return self.lm_head(hidden) + self.final_logits_bias


class DecoderModel(_LogitsHead):
    """First step: decoder input ids + encoder output -> logits and every layer's self and cross K/V."""

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask):
        out = self.decoder(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states,
                           encoder_attention_mask=encoder_attention_mask, use_cache=True, return_dict=True)
        present = [t for layer in out.past_key_values.to_legacy_cache() for t in layer]
        return (self.logits(out.last_hidden_state), *present)


class DecoderWithPastModel(_LogitsHead):
    """Later steps: the new token + past self K/V + cross K/V (reused) -> logits and the grown self K/V."""

    def forward(self, input_ids, encoder_attention_mask, *past):
        layers = tuple(tuple(past[i : i + 4]) for i in range(0, len(past), 4))
        cache = EncoderDecoderCache.from_legacy_cache(layers)  # marks cross K/V as computed: never recomputed
        # The decoder reads only the shape (batch, source length) of encoder_hidden_states when the cross
        # K/V come from the cache; a slice of the cross key gives that shape without new memory.
        shape_only = past[2][:, 0, :, :1]
        out = self.decoder(input_ids=input_ids, encoder_hidden_states=shape_only,
                           encoder_attention_mask=encoder_attention_mask, past_key_values=cache,
                           use_cache=True, return_dict=True)
        present = [t for layer in out.past_key_values.to_legacy_cache() for t in layer[:2]]
        return (self.logits(out.last_hidden_state), *present)


class TranslationStepModel(nn.Module):
    """The no-cache baseline: source + whole decoder prefix -> logits, recomputed from scratch every step."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids, use_cache=False).logits


@dataclass(frozen=True)
class Subgraph:
    """One exported file: how to wrap the model, what goes in and out, which axes are dynamic."""

    file: str
    wrapper: Callable[[Any], nn.Module]
    inputs: list[str]
    outputs: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    sample: Callable[["Sample"], tuple]


B, S, T, P = "batch_size", "encoder_sequence_length", "decoder_sequence_length", "past_decoder_sequence_length"


def past_names(layers: int) -> list[str]:
    """decoder_with_past's cache inputs, in the per-layer order self key, self value, cross key, cross value."""
    return [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in KV]


def subgraphs(layers: int) -> list[Subgraph]:
    """The four files of the hand export for a model with `layers` decoder layers."""
    past = past_names(layers)
    present = [f"present.{i}.{kv}" for i in range(layers) for kv in KV]
    present_self = [n for n in present if ".decoder." in n]

    def axes(names, seq_axis_name):
        return {n: {0: B, 2: seq_axis_name(n)} for n in names}

    return [
        Subgraph("encoder_model.onnx", EncoderModel, ["input_ids", "attention_mask"], ["last_hidden_state"],
                 {"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S}, "last_hidden_state": {0: B, 1: S}},
                 lambda s: (s.input_ids, s.attention_mask)),
        Subgraph("decoder_model.onnx", DecoderModel,
                 ["input_ids", "encoder_hidden_states", "encoder_attention_mask"], ["logits", *present],
                 {"input_ids": {0: B, 1: T}, "encoder_hidden_states": {0: B, 1: S},
                  "encoder_attention_mask": {0: B, 1: S}, "logits": {0: B, 1: T},
                  **axes(present, lambda n: T if ".decoder." in n else S)},
                 lambda s: (s.decoder_input_ids, s.encoder_hidden_states, s.attention_mask)),
        Subgraph("decoder_with_past_model.onnx", DecoderWithPastModel,
                 ["input_ids", "encoder_attention_mask", *past], ["logits", *present_self],
                 {"input_ids": {0: B}, "encoder_attention_mask": {0: B, 1: S}, "logits": {0: B},
                  **axes(past, lambda n: P if ".decoder." in n else S),
                  **axes(present_self, lambda n: f"{P} + 1")},
                 lambda s: (s.next_token, s.attention_mask, *s.past)),
        Subgraph("translation_step.onnx", TranslationStepModel,
                 ["input_ids", "attention_mask", "decoder_input_ids"], ["logits"],
                 {"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S}, "decoder_input_ids": {0: B, 1: T},
                  "logits": {0: B, 1: T}},
                 lambda s: (s.input_ids, s.attention_mask, s.decoder_input_ids)),
    ]


class Sample:
    """Export-time example inputs: batch 2, padded source of 7, decoder prefix of 3, past of 4.

    Every dynamic dimension gets a distinct size above 1, so no exporter can mistake one for a constant.
    """

    def __init__(self, model, batch: int = 2, source: int = 7, target: int = 3, past: int = 4):
        generator = torch.Generator().manual_seed(0)
        vocab, start = model.config.vocab_size, model.config.decoder_start_token_id
        self.input_ids = torch.randint(2, vocab - 1, (batch, source), generator=generator)
        self.input_ids[:, -1] = model.config.eos_token_id
        self.attention_mask = torch.ones(batch, source, dtype=torch.int64)
        self.attention_mask[1:, source - 2 :] = 0  # padding in every row after the first
        self.decoder_input_ids = torch.randint(2, vocab - 1, (batch, target), generator=generator)
        self.decoder_input_ids[:, 0] = start
        with torch.no_grad():
            self.encoder_hidden_states = model.get_encoder()(self.input_ids, self.attention_mask).last_hidden_state
            prefix = torch.randint(2, vocab - 1, (batch, past), generator=generator)
            prefix[:, 0] = start
            out = model.get_decoder()(input_ids=prefix, encoder_hidden_states=self.encoder_hidden_states,
                                      encoder_attention_mask=self.attention_mask, use_cache=True)
        self.past = [t for layer in out.past_key_values.to_legacy_cache() for t in layer]
        self.next_token = torch.randint(2, vocab - 1, (batch, 1), generator=generator)


def load_for_export(model_dir: str | Path, attention: str = "sdpa"):
    """The model in eval mode with the given attention implementation ("sdpa" is transformers' default)."""
    from transformers import MarianMTModel

    return MarianMTModel.from_pretrained(model_dir, attn_implementation=attention).eval()


def export_manual(model_dir: str | Path, out_dir: str | Path, exporter: str = "torchscript",
                  opset: int = DEFAULT_OPSET, attention: str = "sdpa", files: list[str] | None = None) -> dict[str, Any]:
    """Export `model_dir` into `out_dir` (replaced atomically); returns the manifest."""
    model = load_for_export(model_dir, attention)
    return export_model(model, out_dir, exporter, opset, source_dir=model_dir, files=files)


def export_model(model, out_dir: str | Path, exporter: str = "torchscript", opset: int = DEFAULT_OPSET,
                 source_dir: str | Path | None = None, files: list[str] | None = None) -> dict[str, Any]:
    """Export an in-memory model; refuses training mode, checks every file, moves the dir into place."""
    check_request(model, exporter, opset)
    specs = [s for s in subgraphs(model.config.decoder_layers) if files is None or s.file in files]
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        sample = Sample(model)
        entries = {}
        for spec in specs:
            entries[spec.file] = export_subgraph(model, spec, sample, tmp / spec.file, exporter, opset)
        manifest = build_manifest(model, tmp, entries, exporter, opset, source_dir)
        for name in MODEL_FILES if source_dir else ():
            if (Path(source_dir) / name).is_file():
                shutil.copy2(Path(source_dir) / name, tmp / name)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def check_request(model, exporter: str, opset: int) -> None:
    """Clear errors for an unknown exporter, an opset it cannot write, or a model in training mode."""
    if exporter not in EXPORTERS:
        raise ExportError(f"unknown exporter {exporter!r}; choose one of {', '.join(EXPORTERS)}")
    allowed = OPSETS[exporter]
    if opset not in allowed:
        raise ExportError(f"opset {opset} is out of range for the {exporter} exporter ({allowed.start}..{allowed.stop - 1})")
    training = [name or type(model).__name__ for name, m in model.named_modules() if m.training]
    if training:
        raise ExportError(
            f"model is in training mode ({len(training)} modules, e.g. {training[0]}): dropout would be "
            "recorded in the graph and outputs would change from run to run. Call model.eval() before exporting."
        )


def export_subgraph(model, spec: Subgraph, sample: Sample, path: Path, exporter: str, opset: int) -> dict[str, Any]:
    """Export one subgraph to `path` (weights inside the file) and check it; returns timing and size."""
    import onnx

    wrapper = spec.wrapper(model).train(model.training)  # the model's mode, not eval() behind its back
    args = spec.sample(sample)
    start = time.perf_counter()
    with warnings.catch_warnings(), torch.no_grad(), _quiet_torch_logs():
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes; parity is checked
        kwargs: dict[str, Any] = dict(input_names=spec.inputs, output_names=spec.outputs, opset_version=opset)
        if exporter == "dynamo":
            kwargs.update(dynamo=True, dynamic_shapes=dynamic_shapes(spec, wrapper), external_data=False, optimize=True,
                          verbose=False)
        else:
            kwargs.update(dynamo=False, dynamic_axes=spec.dynamic_axes, do_constant_folding=True)
        torch.onnx.export(wrapper, args, str(path), **kwargs)
    seconds = time.perf_counter() - start
    onnx.checker.check_model(str(path), full_check=True)
    return {"seconds": round(seconds, 2), "bytes": path.stat().st_size}


@contextlib.contextmanager
def _quiet_torch_logs():
    """Silence the exporters' log lines (e.g. 'torchvision is not installed'); errors still raise."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "torch.fx")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def error_summary(err: BaseException) -> str:
    """The line of an exporter's exception that says what went wrong (torch.export puts it under a heading)."""
    text = str(err)
    if "## Exception summary" in text:
        text = text.split("## Exception summary", 1)[1]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not line.startswith("(Refer")]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:400]


def dynamic_shapes(spec: Subgraph, wrapper: nn.Module) -> tuple:
    """torch.export's form of the dynamic axes: one shared Dim per axis name, shaped like forward's args.

    torch.export binds a `*past` parameter as one tuple, so the trailing inputs are grouped the same way.
    """
    from torch.export import Dim

    dims: dict[str, Any] = {}
    shapes = [
        {axis: dims.setdefault(name, Dim(name.replace(" ", ""), min=1, max=4096))
         for axis, name in spec.dynamic_axes[inp].items()}
        for inp in spec.inputs
    ]
    parameters = inspect.signature(wrapper.forward).parameters.values()
    fixed = sum(p.kind is not inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return (*shapes[:fixed], tuple(shapes[fixed:])) if fixed < len(shapes) else tuple(shapes)


def build_manifest(model, directory: Path, entries: dict[str, dict], exporter: str, opset: int,
                   source_dir) -> dict[str, Any]:
    """Files with their inputs/outputs (dtype, symbolic shape), opset, exporter, versions, config hash."""
    from mtonnx.envinfo import PACKAGES, version_of

    config = json.dumps(model.config.to_dict(), sort_keys=True, default=str)
    return {
        "exporter": exporter,
        "opset": opset,
        "source": str(source_dir) if source_dir else None,
        "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
        "versions": {name: version_of(name) for name in PACKAGES},
        "files": {name: {**entry, **io_table(directory / name)} for name, entry in entries.items()},
    }


def io_table(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The graph's inputs and outputs: name, element type and shape with symbolic dims by name."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph

    def describe(values):
        rows = []
        for v in values:
            tensor = v.type.tensor_type
            dims = [d.dim_param or d.dim_value for d in tensor.shape.dim]
            rows.append({"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
                         "shape": dims})
        return rows

    return {"inputs": describe(graph.input), "outputs": describe(graph.output)}


def replace_dir(new: Path, target: Path) -> None:
    """Move `new` to `target`; an existing target is swapped out first and deleted only afterwards."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}-old-{os.getpid()}")
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
