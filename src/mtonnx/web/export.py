"""The web export: a model directory that Transformers.js and this project's JavaScript runtime (js/) load offline,
with a page that translates in the browser.

Transformers.js reads optimum's layout: `onnx/encoder_model.onnx` and `onnx/decoder_model_merged.onnx` (a suffix
per precision: `_quantized` for int8), `tokenizer.json`, `config.json` and `generation_config.json`. The merged
decoder is used because one file with both steps is what a page downloads once. `web.json` names the files, the
precision the runtime and the page load as Transformers.js's `dtype` (`precisions` lists every one written; the
gates then keep one: `keep_precision`), the source prefix and the ids target.spm decodes (the JavaScript
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
    quantized: str | Path | None = None,
) -> dict[str, Any]:
    """Write the web export of `onnx_dir`'s encoder_model.onnx and decoder_model_merged.onnx (optimum's names), and
    of `quantized`'s as the q8 files when given, with the tokenizer and configs of `tokenizer_dir` into `out_dir`
    (staged: complete or absent); `dtype` is the precision the runtime and the page load. Returns web.json."""
    sources = {"fp32": Path(onnx_dir), **({"q8": Path(quantized)} if quantized is not None else {})}
    tokenizer_dir = Path(tokenizer_dir)
    for where in sources.values():
        missing = [f"{name}.onnx" for name in (ENCODER, DECODER) if not (where / f"{name}.onnx").is_file()]
        if missing:
            raise FileNotFoundError(f"{where} has no {', '.join(missing)}: the web export needs optimum's layout")
    if dtype not in sources:
        raise ValueError(f"the web export ships {dtype}, but only {', '.join(sources)} files were given")
    precisions = {d: onnx_files(d) for d in sources}
    manifest = {
        "model": model,
        "variant": variant,
        "dtype": dtype,
        "files": precisions[dtype],
        "precisions": precisions,
        "sizes": {
            files[role]: (sources[d] / f"{name}.onnx").stat().st_size
            for d, files in precisions.items()
            for role, name in ROLES
        },
        "source_prefix": source_prefix,
        "page": page_unavailable() or "index.html",
        "target_ids": target_piece_ids(tokenizer_dir),
    }
    with staged_dir(out_dir) as stage:
        stage.chmod(0o755)  # served as it is: readable by the web server's user
        (stage / "onnx").mkdir()
        for d, files in precisions.items():
            for role, name in ROLES:
                link_or_copy(sources[d] / f"{name}.onnx", stage / files[role])
        for name in COPIED:
            shutil.copyfile(
                tokenizer_dir / name if (tokenizer_dir / name).is_file() else sources["fp32"] / name, stage / name
            )
        tokenizer = marian_tokenizer_json(tokenizer_dir)
        (stage / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
        if manifest["page"] == "index.html":
            _write_page(stage)
        write_json(stage / MANIFEST, manifest)
    return manifest


def keep_precision(web_dir: str | Path, dtype: str, variant: str) -> dict[str, Any]:
    """Keep only `dtype`'s ONNX files in the web export `web_dir` (the one its gates chose; a page downloads what
    web.json names, and nothing else need ship), recorded in web.json with the `variant` it stands for; returns
    web.json."""
    web_dir = Path(web_dir)
    manifest = json.loads((web_dir / MANIFEST).read_text(encoding="utf-8"))
    kept = manifest["precisions"][dtype]
    for d, files in manifest["precisions"].items():
        if d != dtype:
            for name in files.values():
                (web_dir / name).unlink()
                manifest["sizes"].pop(name)
    manifest.update(dtype=dtype, variant=variant, files=kept, precisions={dtype: kept})
    write_json(web_dir / MANIFEST, manifest)
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
