"""`mtonnx doctor` on a web export: the JavaScript pitfalls, each a check with its evidence and fix.

A web export passes the Python runtime's checks only through its gates (web.parity); what goes wrong in
JavaScript is read off its files here, so that a web export made elsewhere, or edited, is checked before a page
ships it:
- the files web.json names are there, at the sizes it records (a page shows a progress bar against them);
- tokenizer.json keeps sentencepiece's normalizer (`precompiled_charsmap: null` is refused by Rust `tokenizers`,
  and gives other ids on full-width or accented input);
- ids and masks are int64 (JavaScript feeds BigInt64Array; a plain number array is refused);
- a multilingual model's `>>id<<` codes are added tokens (else Transformers.js cuts the prefix into pieces), and
  web.json names the prefix the run translates with;
- the lm_head covers the whole vocabulary (a cut one returns columns that are not vocabulary ids, and no
  JavaScript runtime reads output_rows.json);
- an int8 decoder is quantized in both branches of the merged decoder, one activation scale per row (a
  per-tensor scale makes a sentence's tokens depend on its batch);
- the page has its scripts and WASM beside it (it loads offline), and the isolation headers it needs for threads.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mtonnx.check.doctor import Check
from mtonnx.web.export import MANIFEST, VENDOR
from mtonnx.web.tokenizer_json import language_codes

ID_INPUTS = ("input_ids", "attention_mask", "encoder_attention_mask")
PER_TENSOR = "DynamicQuantizeLinear"  # dynamic int8's activation quantization: one scale for the whole batch


def is_web_export(directory: str | Path) -> bool:
    """Whether `directory` is a web export (it holds web.json)."""
    return (Path(directory) / MANIFEST).is_file()


def diagnose_web(web_dir: str | Path) -> list[dict[str, Any]]:
    """Every check on the web export `web_dir`, as doctor's rows; stops after a failed file check."""
    web_dir = Path(web_dir)
    manifest = json.loads((web_dir / MANIFEST).read_text(encoding="utf-8"))
    rows = [check_files(web_dir, manifest)]
    if rows[0].status != "fail":
        graphs = _graphs(web_dir, manifest)
        rows += [
            check_normalizer(web_dir),
            check_int64(graphs),
            check_prefix(web_dir, manifest),
            check_lm_head(web_dir, graphs),
            check_int8_rows(manifest, graphs),
            check_page(web_dir, manifest),
        ]
    return [asdict(r) for r in rows]


def _graphs(web_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    import onnx

    return {role: onnx.load(str(web_dir / name), load_external_data=False) for role, name in manifest["files"].items()}


def check_files(web_dir: Path, manifest: dict[str, Any]) -> Check:
    """The ONNX files web.json names exist at the sizes it records."""
    name = f"web: the files {MANIFEST} names"
    wrong = []
    for file in manifest["files"].values():
        path = web_dir / file
        if not path.is_file():
            wrong.append(f"{file} is missing")
        elif path.stat().st_size != manifest["sizes"].get(file):
            wrong.append(f"{file} has {path.stat().st_size} bytes, {MANIFEST} says {manifest['sizes'].get(file)}")
    if wrong:
        return Check(name, "fail", "; ".join(wrong), "copy the whole directory again, or `mtonnx export-web RUN_DIR`")
    return Check(name, "ok", f"{manifest['dtype']}: {', '.join(manifest['files'].values())}")


def check_normalizer(web_dir: Path) -> Check:
    """tokenizer.json normalizes as source.spm does: a Precompiled charsmap that is not null."""
    name = "web: tokenizer.json keeps the normalizer"
    spec = json.loads((web_dir / "tokenizer.json").read_text(encoding="utf-8"))
    steps = (spec.get("normalizer") or {}).get("normalizers") or [spec.get("normalizer") or {}]
    charsmap = next((s.get("precompiled_charsmap") for s in steps if s.get("type") == "Precompiled"), None)
    if not charsmap:
        return Check(
            name,
            "fail",
            "no precompiled_charsmap: Rust tokenizers refuses the file; full-width and accented input get other ids",
            "keep source.spm's charsmap: `mtonnx export-web RUN_DIR` writes it",
        )
    return Check(name, "ok", f"source.spm's charsmap ({len(charsmap)} base64 characters)")


def check_int64(graphs: dict[str, Any]) -> Check:
    """Ids and masks are int64 in both files: what Transformers.js and the JavaScript runtime feed (BigInt64Array)."""
    import onnx

    name = "web: ids and masks are int64"
    wrong = [
        f"{role}:{i.name} is {onnx.TensorProto.DataType.Name(i.type.tensor_type.elem_type)}"
        for role, graph in graphs.items()
        for i in graph.graph.input
        if i.name in ID_INPUTS and i.type.tensor_type.elem_type != onnx.TensorProto.INT64
    ]
    if wrong:
        return Check(name, "fail", "; ".join(wrong), "export with int64 ids and masks (optimum's exporter does)")
    return Check(name, "ok", "feed them as BigInt64Array in JavaScript (js/ does)")


def check_prefix(web_dir: Path, manifest: dict[str, Any]) -> Check:
    """A multilingual model's `>>id<<` codes are added tokens, and web.json names the prefix to translate with."""
    name = "web: the >>id<< target-language prefix"
    spec = json.loads((web_dir / "tokenizer.json").read_text(encoding="utf-8"))
    codes = language_codes({piece: i for i, (piece, _) in enumerate(spec["model"]["vocab"])})
    if not codes:
        return Check(name, "ok", "one target language: no >>id<< codes")
    added = {t["content"] for t in spec["added_tokens"]}
    cut = [c for c in codes if c not in added]
    if cut:
        return Check(
            name,
            "fail",
            f"{len(cut)} of {len(codes)} codes (e.g. {cut[0]}) are not added tokens: Transformers.js cuts them "
            "into pieces",
            "`mtonnx export-web RUN_DIR` adds them",
        )
    prefix = manifest.get("source_prefix") or ""
    if prefix not in codes:  # a model whose vocabulary has codes it was not trained with needs none
        return Check(
            name,
            "warn",
            f"{len(codes)} >>id<< codes in the vocabulary, and {MANIFEST}'s source_prefix is {prefix!r}: a model "
            "trained with them translates into whichever language it guesses",
            f"if it was, set model.source_prefix in the params (e.g. {codes[0]}) and export again",
        )
    return Check(name, "ok", f"{prefix} in front of every sentence, kept whole ({len(codes)} codes)")


def check_lm_head(web_dir: Path, graphs: dict[str, Any]) -> Check:
    """The decoder's logits cover config.json's whole vocabulary (a cut lm_head's columns are not vocabulary ids)."""
    name = "web: logits over the whole vocabulary"
    vocab = json.loads((web_dir / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    logits = next(o for o in graphs["decoder"].graph.output if o.name == "logits")
    width = logits.type.tensor_type.shape.dim[-1].dim_value
    if width != vocab:
        return Check(
            name,
            "fail",
            f"the decoder returns {width} columns for a {vocab}-entry vocabulary: a cut lm_head, whose columns no "
            "JavaScript runtime maps back (output_rows.json is the Python runtime's)",
            "export the full lm_head: `mtonnx export-web RUN_DIR` uses optimum's export",
        )
    return Check(name, "ok", f"{vocab} columns")


def check_int8_rows(manifest: dict[str, Any], graphs: dict[str, Any]) -> Check:
    """An int8 export quantizes the merged decoder's branches, with no per-tensor activation scale anywhere."""
    from mtonnx.passes.row_scales import graphs as nested

    name = "web: int8 in both decoder branches, one scale per row"
    if manifest["dtype"] != "q8":
        return Check(name, "ok", f"{manifest['dtype']}: nothing quantized")
    branches = nested(graphs["decoder"].graph)[1:]
    plain = [b.name for b in branches if not any(n.op_type == "MatMulIntegerToFloat" for n in b.node)]
    shared = sum(n.op_type == PER_TENSOR for g in graphs.values() for b in nested(g.graph) for n in b.node)
    if plain or shared:
        evidence = (
            f"{PER_TENSOR} x{shared}: one activation scale for the whole batch, so a sentence's tokens depend on "
            "its neighbours"
            if shared
            else f"branches without integer products: {', '.join(plain)} (quantize_dynamic skips subgraphs)"
        )
        return Check(name, "fail", evidence, "`mtonnx export-web RUN_DIR` quantizes with per-row scales")
    return Check(name, "ok", f"{len(branches)} branches with per-row integer products")


def check_page(web_dir: Path, manifest: dict[str, Any]) -> Check:
    """The page's scripts and WASM are beside it, so it loads offline."""
    name = "web: the page loads offline"
    if manifest.get("page") != "index.html":
        return Check(name, "warn", f"no page: {manifest.get('page')}", "`make js`, then `mtonnx export-web RUN_DIR`")
    missing = [f"vendor/{Path(v).name}" for v in VENDOR if not (web_dir / "vendor" / Path(v).name).is_file()]
    if missing:
        return Check(name, "fail", f"{', '.join(missing)} missing", "copy the whole directory, vendor/ included")
    return Check(
        name,
        "ok",
        "scripts and WASM beside index.html; WASM uses several threads only where the server sends COOP and COEP "
        "(`mtonnx serve --web` does)",
    )
