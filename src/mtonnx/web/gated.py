"""The web export written and gated in one step, as the pipeline's web stage and `mtonnx export-web` both make it.

write (optimum's fp32 pair and, for a run that deploys a quantized variant, its int8 form: web.quantized) → gates
(web.parity.web_gate: Node against the Python runtime on each precision, int8's fidelity to fp32, the page against
Node) → keep the precision the gates chose, or remove the whole export when a gate failed: an export is published
only with the tokens its gates saw. `export_run` does it for a run made before the pipeline wrote one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mtonnx.runtime import layout
from mtonnx.settings import Quant
from mtonnx.web.export import keep_precision, write_web
from mtonnx.web.parity import PageFactory, web_gate
from mtonnx.web.quantized import build_int8

WEB_INT8 = "web_int8"  # RUN_DIR/web_int8: the int8 files, loadable by the Python runtime for the gates
VARIANTS = {"fp32": "fp32", "q8": "int8-rows"}  # the web export's precision -> the recipe it was made with


def gated_export(
    optimum_dir: str | Path,
    out_dir: str | Path,
    sources: list[str],
    *,
    model: str,
    beams: int,
    max_new_tokens: int,
    fidelity_min: float,
    source_prefix: str = "",
    int8_dir: str | Path | None = None,
    page: PageFactory | None = None,
) -> dict[str, Any]:
    """The web export of `optimum_dir` (and, given `int8_dir`, of the int8 files web.quantized builds there) in
    `out_dir`, gated on `sources`; returns the run's `web` section: the variant and dtype kept, size, page, every
    gate, `published` (and `reason` when not: `out_dir` is then removed)."""
    out = Path(out_dir)
    if int8_dir is not None:
        build_int8(optimum_dir, int8_dir)
    write_web(
        optimum_dir, optimum_dir, out, model=model, variant="fp32", source_prefix=source_prefix, quantized=int8_dir
    )
    gate = web_gate(
        out,
        optimum_dir,
        sources,
        beams,
        max_new_tokens,
        fidelity_min,
        source_prefix=source_prefix,
        quantized_dir=int8_dir,
        page=page,
    )
    manifest = keep_precision(out, gate["dtype"], VARIANTS[gate["dtype"]])
    section = {
        "variant": manifest["variant"],
        "dtype": manifest["dtype"],
        "size_mb": round(sum(manifest["sizes"].values()) / 1e6, 1),
        "page": manifest["page"],
        **{k: v for k, v in gate.items() if k != "dtype"},
        "published": gate["gate"] != "fail",
    }
    if not section["published"]:
        shutil.rmtree(out)
        section["reason"] = "the JavaScript runtime's tokens differ from the Python runtime's on the files it ships"
    return section


class WebExportError(ValueError):
    """A directory the web export cannot be made from; str() is the one line shown, with what to do."""


def export_run(
    run_dir: str | Path, out_dir: str | Path | None = None, page: PageFactory | None = None
) -> tuple[Path, dict[str, Any]]:
    """The web export of a run made before the pipeline wrote one (its optimum export, with the model name and
    source prefix deploy/ records, and the int8 form when it deploys a quantized variant) into `out_dir` (default
    RUN_DIR/deploy/web), gated on the run's evaluation sentences as the pipeline's web stage gates it (the page in
    `page`, a browser session, when given); returns the directory and the run's `web` section. WebExportError when
    a gate failed (nothing is kept)."""

    run_dir = Path(run_dir)
    optimum, deploy = run_dir / "export_optimum", run_dir / "deploy" / "deploy.json"
    if not optimum.is_dir() or not deploy.is_file():
        raise WebExportError(
            f"{run_dir} is not a run directory with export_optimum/ and deploy/ (a deploy/ directory alone holds no "
            "merged decoder): give the directory `mtonnx run` or `mtonnx migrate` wrote"
        )
    facts = json.loads(deploy.read_text(encoding="utf-8"))
    if facts.get("family", "marian") != "marian":
        raise WebExportError(f"{run_dir}: the web export covers Marian models; this one is {facts['family']}")
    out = Path(out_dir) if out_dir is not None else run_dir / "deploy" / "web"
    translations = run_dir / "variants" / layout.TRANSLATIONS
    sources = json.loads(translations.read_text(encoding="utf-8"))["sources"] if translations.is_file() else []
    params = json.loads((run_dir / "env.json").read_text(encoding="utf-8")).get("params", {})
    generation = json.loads((optimum / "generation_config.json").read_text(encoding="utf-8"))
    int8_dir = run_dir / WEB_INT8 if facts.get("variant", "fp32") != "fp32" else None
    section = gated_export(
        optimum,
        out,
        sources,
        model=facts["model"],
        beams=params.get("generation", {}).get("num_beams") or generation.get("num_beams", 1),
        max_new_tokens=params.get("generation", {}).get("max_new_tokens", 64),
        fidelity_min=params.get("quant", {}).get("fidelity_min", Quant.fidelity_min),
        source_prefix=facts.get("source_prefix") or "",
        int8_dir=int8_dir,
        page=page,
    )
    if not section["published"]:
        raise WebExportError(f"{run_dir}: {section['reason']} ({section}): no web export kept")
    return out, section
