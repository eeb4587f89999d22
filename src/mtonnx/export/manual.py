"""Export a model of any family (runtime.families) by hand with `torch.onnx.export`: the subgraphs of
export.wrappers, one generic step.

Each file is exported, checked with onnx.checker and described in the export manifest (layout.EXPORT_MANIFEST:
inputs/outputs with dtypes and symbolic shapes, opset, exporter, versions, config hash); the files are written
to a staging directory and moved into place only when all succeeded.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import logging
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mtonnx.export.samples import EXPORT_CASE, SampleInputs
from mtonnx.export.wrappers import Subgraph, decoder_layers, subgraphs
from mtonnx.foundation import buildkey
from mtonnx.foundation.files import staged_dir
from mtonnx.params import DEFAULT_EXPORTER, DEFAULT_OPSET, EXPORTERS
from mtonnx.runtime import layout
from mtonnx.runtime.integrity import write_sums

# Opsets each exporter writes correctly in torch 2.13 and ONNX Runtime 1.32 runs (SDPA needs 14; the dynamo
# exporter builds at 18 and silently keeps 18 when asked for 14).
OPSETS = {"torchscript": range(14, 21), "dynamo": range(18, 24)}


class ExportError(RuntimeError):
    """An export that cannot be done as asked; str() says why and what to do."""


def load_for_export(model_dir: str | Path, attention: str | None = None):
    """The model of its family's class in eval mode, with the given attention implementation (None: transformers'
    default, sdpa where the model has it, as Marian and M2M100 do; T5 has eager only)."""
    import transformers

    from mtonnx.runtime import families

    architecture = getattr(transformers, families.of_dir(model_dir).architecture)
    return architecture.from_pretrained(model_dir, attn_implementation=attention).eval()


def supports(model_dir: str | Path, attention: str) -> bool:
    """Whether the model's class has this attention implementation (transformers refuses to load it otherwise)."""
    import transformers

    from mtonnx.runtime import families

    architecture = getattr(transformers, families.of_dir(model_dir).architecture)
    return attention == "eager" or bool(getattr(architecture, f"_supports_{attention}", False))


def export_manual(
    model_dir: str | Path,
    out_dir: str | Path,
    exporter: str = DEFAULT_EXPORTER,
    opset: int = DEFAULT_OPSET,
    attention: str | None = None,
    files: list[str] | None = None,
) -> dict[str, Any]:
    """Export `model_dir` into `out_dir` (replaced atomically); returns the manifest."""
    model = load_for_export(model_dir, attention)
    return export_model(model, out_dir, exporter, opset, source_dir=model_dir, files=files)


EXPORT_VERSIONS = ("torch", "transformers", "onnx", "onnxscript", "mtonnx")  # change an export's bytes


def ensure_exported(
    model_dir: str | Path,
    out_dir: str | Path,
    exporter: str = DEFAULT_EXPORTER,
    opset: int = DEFAULT_OPSET,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """`export_manual`, unless `out_dir` holds an export with the same build key (the model's files, exporter,
    opset, versions: foundation.buildkey); returns the manifest either way, and says which in one log line."""
    parts = {
        "model": buildkey.files_fingerprint(model_dir),
        "exporter": exporter,
        "opset": opset,
        "versions": buildkey.versions(*EXPORT_VERSIONS),
    }
    buildkey.reuse_or_build(out_dir, parts, lambda: export_manual(model_dir, out_dir, exporter, opset), log)
    return json.loads((Path(out_dir) / layout.EXPORT_MANIFEST).read_text(encoding="utf-8"))


def export_model(
    model,
    out_dir: str | Path,
    exporter: str = DEFAULT_EXPORTER,
    opset: int = DEFAULT_OPSET,
    source_dir: str | Path | None = None,
    files: list[str] | None = None,
) -> dict[str, Any]:
    """Export an in-memory model; refuses training mode, checks every file, moves the dir into place."""
    check_request(model, exporter, opset)
    specs = [s for s in subgraphs(decoder_layers(model)) if files is None or s.file in files]
    with staged_dir(out_dir) as tmp:
        sample = SampleInputs(model, EXPORT_CASE)
        entries = {spec.file: export_subgraph(model, spec, sample, tmp / spec.file, exporter, opset) for spec in specs}
        manifest = build_manifest(model, tmp, entries, exporter, opset, source_dir)
        for name in layout.MODEL_FILES if source_dir else ():
            if (Path(source_dir) / name).is_file():
                shutil.copy2(Path(source_dir) / name, tmp / name)
        (tmp / layout.EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        write_sums(tmp)
    return manifest


def check_request(model, exporter: str, opset: int) -> None:
    """Clear errors for an unknown exporter, an opset it cannot write, or a model in training mode."""
    if exporter not in EXPORTERS:
        raise ExportError(f"unknown exporter {exporter!r}; choose one of {', '.join(EXPORTERS)}")
    allowed = OPSETS[exporter]
    if opset not in allowed:
        raise ExportError(
            f"opset {opset} is out of range for the {exporter} exporter ({allowed.start}..{allowed.stop - 1})"
        )
    training = [name or type(model).__name__ for name, m in model.named_modules() if m.training]
    if training:
        raise ExportError(
            f"model is in training mode ({len(training)} modules, e.g. {training[0]}): dropout would be "
            "recorded in the graph and outputs would change from run to run. Call model.eval() before exporting."
        )


def export_subgraph(
    model, spec: Subgraph, sample: SampleInputs, path: Path, exporter: str, opset: int
) -> dict[str, Any]:
    """Export one subgraph to `path` (weights inside the file) and check it; returns timing and size."""
    import onnx

    wrapper = spec.wrapper(model).train(model.training)  # the model's mode, not eval() behind its back
    args = spec.sample(sample)
    start = time.perf_counter()
    with warnings.catch_warnings(), torch.no_grad(), _quiet_torch_logs():
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes; parity is checked
        kwargs: dict[str, Any] = dict(input_names=spec.inputs, output_names=spec.outputs, opset_version=opset)
        if exporter == "dynamo":
            kwargs.update(
                dynamo=True,
                dynamic_shapes=dynamic_shapes(spec, wrapper),
                external_data=False,
                optimize=True,
                verbose=False,
            )
        else:
            kwargs.update(dynamo=False, dynamic_axes=spec.dynamic_axes, do_constant_folding=True)
        torch.onnx.export(wrapper, args, str(path), **kwargs)
    seconds = time.perf_counter() - start
    onnx.checker.check_model(str(path), full_check=True)
    return {"seconds": round(seconds, 2), "bytes": path.stat().st_size}


@contextlib.contextmanager
def _quiet_torch_logs():
    """Silence the exporters' log lines (e.g. 'torchvision is not installed') and the partial graph torch.export
    prints to stderr when it fails (pages of code, each line naming a file where this machine installed
    transformers); errors still raise, with their message."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "torch.fx")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
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
        {
            axis: dims.setdefault(name, Dim(name.replace(" ", ""), min=1, max=4096))
            for axis, name in spec.dynamic_axes[inp].items()
        }
        for inp in spec.inputs
    ]
    parameters = inspect.signature(wrapper.forward).parameters.values()
    fixed = sum(p.kind is not inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return (*shapes[:fixed], tuple(shapes[fixed:])) if fixed < len(shapes) else tuple(shapes)


def build_manifest(
    model, directory: Path, entries: dict[str, dict], exporter: str, opset: int, source_dir
) -> dict[str, Any]:
    """Files with their inputs/outputs (dtype, symbolic shape), opset, exporter, versions, config hash."""
    from mtonnx.foundation.envinfo import PACKAGES, version_of

    config = json.dumps(model.config.to_dict(), sort_keys=True, default=str)
    return {
        "exporter": exporter,
        "opset": opset,
        "source": str(Path(source_dir).resolve()) if source_dir else None,  # doctor follows it from anywhere
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
            rows.append(
                {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name, "shape": dims}
            )
        return rows

    return {"inputs": describe(graph.input), "outputs": describe(graph.output)}
