"""optimum's exporter on the same model, its generate() parity, and a side-by-side with the hand export.

`python -m transformers.onnx --feature translation`, the command older tutorials give, no longer exists;
optimum's `main_export` is its successor. It writes encoder, decoder, decoder-with-past and a merged decoder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtonnx.export.manual import io_table
from mtonnx.foundation import buildkey
from mtonnx.foundation.files import staged_dir
from mtonnx.passes import graphinfo
from mtonnx.runtime import layout
from mtonnx.runtime.integrity import write_sums

TASK = "text2text-generation-with-past"
FILES = layout.OPTIMUM_EXPORT


def export_optimum(model_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """optimum's `main_export` into a staging dir, moved to `out_dir` when complete; returns files and seconds."""
    from optimum.exporters.onnx import main_export

    out_dir, start = Path(out_dir), time.perf_counter()
    with staged_dir(out_dir) as tmp:
        main_export(str(model_dir), output=str(tmp), task=TASK, do_validation=False, device="cpu")
        missing = [f for f in FILES if not (tmp / f).is_file()]
        if missing:
            raise RuntimeError(f"optimum did not write {', '.join(missing)}")
        write_sums(tmp)
    return {"seconds": round(time.perf_counter() - start, 1), "files": {f: (out_dir / f).stat().st_size for f in FILES}}


def ensure_optimum(
    model_dir: str | Path, out_dir: str | Path, log: Callable[[str], None] | None = print
) -> dict[str, Any]:
    """`export_optimum`, unless `out_dir` holds optimum's export of the same model files with the same versions
    (foundation.buildkey); returns its files and seconds (None when it was reused) either way."""
    parts = {
        "model": buildkey.files_fingerprint(model_dir),
        "task": TASK,
        "versions": buildkey.versions("optimum-onnx", "optimum", "torch", "transformers", "onnx"),
    }
    done: dict[str, Any] = {}
    _, reused = buildkey.reuse_or_build(out_dir, parts, lambda: done.update(export_optimum(model_dir, out_dir)), log)
    files = {f: (Path(out_dir) / f).stat().st_size for f in FILES}
    return {"seconds": done.get("seconds"), "files": files, "reused": reused}


def load_ort_model(optimum_dir: str | Path, use_merged: bool = False):
    """optimum's ORTModelForSeq2SeqLM on the CPU provider, split or merged decoder."""
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    return ORTModelForSeq2SeqLM.from_pretrained(
        optimum_dir, use_cache=True, use_merged=use_merged, provider="CPUExecutionProvider"
    )


def side_by_side(manual_dir: str | Path, optimum_dir: str | Path, vocab_size: int, d_model: int) -> dict[str, Any]:
    """Hand export vs optimum: per-file facts, the I/O of the common files, op histograms, duplicated bytes."""
    exports = {"manual": Path(manual_dir), "optimum": Path(optimum_dir)}
    files, ops = [], {}
    for name, directory in exports.items():
        for path in sorted(directory.glob("*.onnx")):
            info = graphinfo.summary(path, vocab_size, d_model)
            ops[f"{name}/{path.stem}"] = info.pop("ops")
            files.append({"export": name, **info})
    io = []
    common = sorted(
        {p.name for p in exports["manual"].glob("*.onnx")} & {p.name for p in exports["optimum"].glob("*.onnx")}
    )
    for file in common:
        tables = {name: io_table(directory / file) for name, directory in exports.items()}
        for kind in ("inputs", "outputs"):
            by_name = {name: {v["name"]: v for v in tables[name][kind]} for name in exports}
            for tensor in dict.fromkeys([*by_name["manual"], *by_name["optimum"]]):
                m, o = by_name["manual"].get(tensor), by_name["optimum"].get(tensor)
                io.append(
                    {
                        "file": file,
                        "kind": kind[:-1],
                        "name": tensor,
                        "manual": f"{m['dtype']} {m['shape']}" if m else "-",
                        "optimum": f"{o['dtype']} {o['shape']}" if o else "-",
                        "same dtype and rank": bool(
                            m and o and m["dtype"] == o["dtype"] and len(m["shape"]) == len(o["shape"])
                        ),
                    }
                )
    duplicated = {
        name: graphinfo.duplicated_mb(sorted(directory.glob("*.onnx"))) for name, directory in exports.items()
    }
    return {"files": files, "io": io, "ops": ops, "duplicated": duplicated}
