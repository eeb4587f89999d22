"""Both torch.onnx exporters attempted on every subgraph: what each produced, the real error where one
failed, export time, file size and parity. Failures are data here, never hidden."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mtonnx.check import parity
from mtonnx.export.manual import error_summary, export_subgraph, load_for_export, supports
from mtonnx.export.samples import EXPORT_CASE, SampleInputs
from mtonnx.export.wrappers import decoder_layers, subgraphs
from mtonnx.params import DEFAULT_OPSET
from mtonnx.passes import graphinfo
from mtonnx.runtime import layout

CONFIGS = (("torchscript", "sdpa"), ("dynamo", "sdpa"), ("dynamo", "eager"))


def default_attention(model_dir: str | Path) -> str:
    """The attention implementation transformers loads the model with by default: sdpa where its class has it (Marian,
    M2M100), else eager (T5)."""
    return "sdpa" if supports(model_dir, "sdpa") else "eager"


def try_exporters(
    model_dir: str | Path,
    reference,
    configs=CONFIGS,
    opset: int = DEFAULT_OPSET,
    tolerance: float = 1e-4,
    exported: Mapping[tuple[str, str], str | Path] | None = None,
) -> list[dict[str, Any]]:
    """One row per (exporter, attention implementation, file); `reference` is the PyTorch model to match. For a model
    without sdpa attention (T5) each exporter is tried with its default (eager) attention instead.

    `exported` maps an (exporter, attention) to a directory export.manual wrote with it at this opset: its files are
    checked where they are and its manifest gives their export time, rather than exporting them a second time."""
    rows = []
    config = reference.config
    specs = subgraphs(decoder_layers(reference))
    default = default_attention(model_dir)
    configs = list(dict.fromkeys((e, a if supports(model_dir, a) else default) for e, a in configs))
    for exporter, attention in configs:
        done_dir = (exported or {}).get((exporter, attention))
        manifest = _manifest(done_dir, exporter, opset, [s.file for s in specs]) if done_dir else None
        model = load_for_export(model_dir, attention) if manifest is None else None
        sample = SampleInputs(model, EXPORT_CASE) if model is not None else None
        work = Path(done_dir) if manifest else Path(tempfile.mkdtemp(prefix=f"mtonnx-{exporter}-{attention}-"))
        try:
            for spec in specs:
                row = {"exporter": exporter, "attention": attention, "file": spec.file}
                try:
                    done = (
                        manifest["files"][spec.file]
                        if manifest
                        else export_subgraph(model, spec, sample, work / spec.file, exporter, opset)
                    )
                except Exception as err:  # the exporter's own failure is the result we report
                    rows.append({**row, "status": "failed", "error": error_summary(err)})
                    continue
                check = parity.file_parity(reference, work, tolerance, files=[spec.file])["files"][spec.file]
                info = graphinfo.summary(work / spec.file, config.vocab_size, config.d_model)
                rows.append(
                    {
                        **row,
                        "status": "ok" if check["pass"] else "parity failed",
                        "error": None,
                        "seconds": done["seconds"],
                        "size_mb": info["size_mb"],
                        "nodes": info["nodes"],
                        "embedding_copies": info["embedding_copies"],
                        "max_abs_diff": check["max_abs_diff"],
                    }
                )
        finally:
            if not manifest:
                shutil.rmtree(work, ignore_errors=True)
    return rows


def _manifest(export_dir: str | Path, exporter: str, opset: int, files: list[str]) -> dict[str, Any] | None:
    """The export manifest of `export_dir` when `exporter` wrote all of `files` into it at `opset`; else None (the
    trial exports anew)."""
    path = Path(export_dir) / layout.EXPORT_MANIFEST
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text(encoding="utf-8"))
    same = manifest.get("exporter") == exporter and manifest.get("opset") == opset
    return manifest if same and all(f in manifest.get("files", {}) for f in files) else None


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (exporter, attention): files exported, which failed, time, size, worst diff, embedding copies."""
    out = []
    for exporter, attention in dict.fromkeys((r["exporter"], r["attention"]) for r in rows):
        mine = [r for r in rows if r["exporter"] == exporter and r["attention"] == attention]
        ok = [r for r in mine if r["status"] == "ok"]
        out.append(
            {
                "exporter": exporter,
                "attention": attention,
                "files ok": f"{len(ok)}/{len(mine)}",
                "failed": ", ".join(r["file"] for r in mine if r["status"] != "ok") or "-",
                "export seconds": round(sum(r["seconds"] for r in ok), 1),
                "total MB": round(sum(r["size_mb"] for r in ok), 2),
                "worst diff": max((r["max_abs_diff"] for r in ok), default=None),
                "embedding copies per decoder file": sorted(
                    {r["embedding_copies"] for r in ok if "decoder" in r["file"]}
                ),
            }
        )
    return out
