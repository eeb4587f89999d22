"""The web export: a model directory that Transformers.js and this project's JavaScript runtime (js/) load offline,
with a page that translates in the browser.

Transformers.js reads optimum's layout: `onnx/encoder_model.onnx` and `onnx/decoder_model_merged.onnx` (a suffix
per precision: `_quantized` for int8), `tokenizer.json`, `config.json` and `generation_config.json`. The merged
decoder is used because one file with both steps is what a page downloads once. `web.json` names the files, the
precision as Transformers.js's `dtype`, the source prefix and the ids target.spm decodes (the JavaScript
tokenizer's decode needs them; tokenizer.json has no room for a second vocabulary).

The page is static: `index.html`, the runtime's modules under `js/` and, under `vendor/`, onnxruntime-web's WASM
build and @huggingface/tokenizers, copied from js/node_modules (`make js`), so it loads with no network and no
build step from any static server. Without those packages the export has no page, and web.json says why.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import link_or_copy, staged_dir, write_json
from mtonnx.web.node import js_dir
from mtonnx.web.tokenizer_json import marian_tokenizer_json, target_piece_ids

ENCODER, DECODER = "encoder_model", "decoder_model_merged"
ROLES = (("encoder", ENCODER), ("decoder", DECODER))
SUFFIX = {"fp32": "", "q8": "_quantized"}  # Transformers.js's dtype -> its file-name suffix
COPIED = ("config.json", "generation_config.json", "tokenizer_config.json")
MANIFEST = "web.json"
# Cross-origin isolation: the headers under which a page may use SharedArrayBuffer, so WASM runs on several threads.
ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}
PAGE_MODULES = ("index.mjs", "browser.mjs", "translator.mjs", "model.mjs", "decoding.mjs", "tokenizer.mjs")
VENDOR = (  # node_modules path -> vendor/ name (the import map in page/index.html names the first two)
    "onnxruntime-web/dist/ort.wasm.min.mjs",
    "@huggingface/tokenizers/dist/tokenizers.min.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm",
)


def onnx_files(dtype: str) -> dict[str, str]:
    """The encoder and decoder file names of a precision, as Transformers.js looks them up."""
    suffix = SUFFIX[dtype]
    return {"encoder": f"onnx/{ENCODER}{suffix}.onnx", "decoder": f"onnx/{DECODER}{suffix}.onnx"}


def write_web(
    onnx_dir: str | Path,
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    *,
    model: str,
    variant: str,
    dtype: str = "fp32",
    source_prefix: str = "",
) -> dict[str, Any]:
    """Write the web export of `onnx_dir`'s encoder_model.onnx and decoder_model_merged.onnx (optimum's names) with
    the tokenizer and configs of `tokenizer_dir` into `out_dir` (staged: complete or absent); returns web.json."""
    onnx_dir, tokenizer_dir = Path(onnx_dir), Path(tokenizer_dir)
    missing = [f"{name}.onnx" for name in (ENCODER, DECODER) if not (onnx_dir / f"{name}.onnx").is_file()]
    if missing:
        raise FileNotFoundError(f"{onnx_dir} has no {', '.join(missing)}: the web export needs optimum's layout")
    files = onnx_files(dtype)
    manifest = {
        "model": model,
        "variant": variant,
        "dtype": dtype,
        "files": files,
        "sizes": {files[role]: (onnx_dir / f"{name}.onnx").stat().st_size for role, name in ROLES},
        "source_prefix": source_prefix,
        "page": page_unavailable() or "index.html",
        "target_ids": target_piece_ids(tokenizer_dir),
    }
    with staged_dir(out_dir) as stage:
        stage.chmod(0o755)  # served as it is: readable by the web server's user
        (stage / "onnx").mkdir()
        for role, name in ROLES:
            link_or_copy(onnx_dir / f"{name}.onnx", stage / files[role])
        for name in COPIED:
            shutil.copyfile(tokenizer_dir / name if (tokenizer_dir / name).is_file() else onnx_dir / name, stage / name)
        tokenizer = marian_tokenizer_json(tokenizer_dir)
        (stage / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
        if manifest["page"] == "index.html":
            _write_page(stage)
        write_json(stage / MANIFEST, manifest)
    return manifest


def page_unavailable() -> str | None:
    """Why the page cannot be written (js/ or its packages missing), else None."""
    missing = [name for name in VENDOR if not (js_dir() / "node_modules" / name).is_file()]
    if not (js_dir() / "page" / "index.html").is_file():
        return f"no page: {js_dir()} holds no page/index.html"
    return f"no page: {', '.join(missing)} missing from {js_dir() / 'node_modules'} (make js)" if missing else None


def _write_page(stage: Path) -> None:
    """index.html, the runtime's modules and the vendored packages, as the page imports them."""
    shutil.copyfile(js_dir() / "page" / "index.html", stage / "index.html")
    (stage / "js").mkdir()
    for name in PAGE_MODULES:
        shutil.copyfile(js_dir() / "src" / name, stage / "js" / name)
    (stage / "vendor").mkdir()
    for name in VENDOR:
        shutil.copyfile(js_dir() / "node_modules" / name, stage / "vendor" / Path(name).name)


class WebExportError(ValueError):
    """A directory the web export cannot be made from; str() is the one line shown, with what to do."""


def export_run(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The web export of a run made before the pipeline wrote one (its optimum export, with the model name and
    source prefix deploy/ records) into `out_dir` (default RUN_DIR/deploy/web), gated in Node on the run's
    evaluation sentences as the pipeline's web stage gates it; returns the directory and the gate."""
    from mtonnx.runtime import layout
    from mtonnx.web.parity import node_parity

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
    prefix = facts.get("source_prefix") or ""
    write_web(optimum, optimum, out, model=facts["model"], variant="fp32", source_prefix=prefix)
    translations = run_dir / "variants" / layout.TRANSLATIONS
    sources = json.loads(translations.read_text(encoding="utf-8"))["sources"] if translations.is_file() else []
    params = json.loads((run_dir / "env.json").read_text(encoding="utf-8")).get("params", {}).get("generation", {})
    generation = json.loads((optimum / "generation_config.json").read_text(encoding="utf-8"))
    beams = params.get("num_beams") or generation.get("num_beams", 1)
    gate = node_parity(out, optimum, sources, beams, params.get("max_new_tokens", 64), prefix)
    if gate["gate"] == "fail":
        shutil.rmtree(out)
        raise WebExportError(f"{run_dir}: Node's tokens differ from the Python runtime's ({gate}): no web export kept")
    return out, gate
