"""The lexical shortlist: which target pieces a sentence may need, learned from a training split, and a variant
whose decoders read only a batch's shortlisted lm_head columns (runtime.shortlist).

Learned as Marian's shortlists and CTranslate2's vocabulary maps are used: the `frequent` target pieces (by the
sentences they occur in) are always kept, and each source piece brings the `per_source` target pieces most
associated with it: by the Dice coefficient of the sentence pairs they occur in, 2 |s and t| / (|s| + |t|), which
unlike the raw count does not hand every source piece the same common target pieces. Hand-written, from
sentence-level co-occurrence counts: Marian's and CTranslate2's lists come from word alignments (fast_align),
which no pinned PyPI package provides, and a shortlist only needs to contain the right pieces, not to align them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from mtonnx.passes.output_rows import columns_as_inputs
from mtonnx.runtime import layout
from mtonnx.runtime.tokenizer import SpmTokenizer
from mtonnx.variants.restricted import rewrite_decoders


def learn_shortlist(
    pairs: Iterable[tuple[str, str]],
    tokenizer: SpmTokenizer,
    frequent: int,
    per_source: int,
    source_prefix: str = "",
) -> dict[str, Any]:
    """The shortlist of (English, Chinese) `pairs`: {"always": the special ids and the `frequent` most common
    target ids, "by_source": {source id: its `per_source` most associated target ids (Dice), ascending}, "learned":
    the counts behind it}. Ties go to the lower id, so the same pairs always give the same lists."""
    if frequent < 0 or per_source < 0:
        raise ValueError(f"frequent and per_source must be >= 0, got {frequent} and {per_source}")
    specials = sorted(tokenizer.special_ids)
    vocab, codes, seen, sentences = tokenizer.vocab_size, [], [], 0
    for en, zh in pairs:
        source = np.unique([i for i in tokenizer.encode(f"{source_prefix} {en}".strip()) if i not in specials])
        pieces = tokenizer.target.encode(zh, out_type=str)
        target = np.unique([tokenizer.encoder.get(p, tokenizer.unk_token_id) for p in pieces]).astype(np.int64)
        codes.append((source.astype(np.int64)[:, None] * vocab + target[None, :]).reshape(-1))
        seen.append((source, target))
        sentences += 1
    if not sentences:
        raise ValueError("no sentence pairs to learn a shortlist from")
    source_counts, target_counts = (
        np.bincount(np.concatenate([s[side] for s in seen]).astype(np.int64), minlength=vocab) for side in (0, 1)
    )
    by_count = np.lexsort((np.arange(vocab), -target_counts))  # most sentences first, then the lower id
    common = [int(i) for i in by_count[:frequent] if target_counts[i] > 0]
    always = sorted(set(specials) | set(common))
    pair, count = np.unique(np.concatenate(codes), return_counts=True)
    source_of, target_of = pair // vocab, pair % vocab
    keep = ~np.isin(target_of, always)
    source_of, target_of, count = source_of[keep], target_of[keep], count[keep]
    dice = 2 * count / (source_counts[source_of] + target_counts[target_of])
    order = np.lexsort((target_of, -dice, source_of))  # per source id: most associated first, then the lower id
    by_source: dict[str, list[int]] = {}
    for s, t in zip(source_of[order].tolist(), target_of[order].tolist()):
        listed = by_source.setdefault(str(s), [])
        if len(listed) < per_source:
            listed.append(t)
    by_source = {s: sorted(t) for s, t in by_source.items() if t}
    return {
        "always": always,
        "by_source": by_source,
        "learned": {"pairs": sentences, "frequent": frequent, "per_source": per_source, "source_ids": len(by_source)},
    }


def build_shortlisted(source_dir: str | Path, out_dir: str | Path, shortlist: dict[str, Any]) -> dict[str, Any]:
    """`source_dir` (a variant with an untied, per-tensor quantized or fp32 lm_head) whose decoders take the lm_head
    columns as inputs, with `shortlist` (learn_shortlist) and the full lm_head arrays beside them, into `out_dir`;
    returns the manifest. Every decoder must hold the same lm_head (they do: one model's files)."""
    heads: list[dict[str, np.ndarray]] = []

    def rewrite(model: onnx.ModelProto) -> dict[str, Any]:
        heads.append(columns_as_inputs(model))
        if any(not np.array_equal(heads[0][k], heads[-1][k]) for k in layout.HEAD_COLUMN_INPUTS):
            raise ValueError("the decoders hold different lm_head weights: not one model's files")
        vocab = heads[0][layout.HEAD_COLUMN_INPUTS[0]].shape[-1]
        return {"columns": "an input (runtime.shortlist)", "vocab": int(vocab)}

    def files() -> dict[str, bytes]:
        if not heads:
            raise ValueError(f"{source_dir} has no decoder with logits to shortlist")
        arrays = io.BytesIO()
        np.savez(arrays, **heads[0])
        table = {k: shortlist[k] for k in ("always", "by_source")}
        return {layout.SHORTLIST: (json.dumps(table) + "\n").encode(), layout.HEAD_COLUMNS: arrays.getvalue()}

    recipe = {"shortlist": shortlist.get("learned", {})}
    return rewrite_decoders(source_dir, out_dir, rewrite, files, recipe)


def vmap_text(shortlist: dict[str, Any], tokenizer: SpmTokenizer) -> str:
    """The same shortlist as CTranslate2's vocabulary map (`vmap.txt` in its model directory, used with
    use_vmap=True): `source piece<TAB>target pieces`, and the pieces always kept on the line with an empty source."""
    piece = tokenizer.decoder.__getitem__
    lines = ["\t" + " ".join(map(piece, shortlist["always"]))]
    lines += [f"{piece(int(s))}\t{' '.join(map(piece, t))}" for s, t in shortlist["by_source"].items()]
    return "\n".join(lines) + "\n"
