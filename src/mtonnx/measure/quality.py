"""Translations with any model's `generate` (PyTorch, or optimum's ORT model), and BLEU / chrF.

The PyTorch outputs (token ids and text) are the baseline every later export is compared with
(report.baseline). Scores use sacrebleu with tokenize="zh" (character-level for Chinese), signatures recorded.
"""

from __future__ import annotations

import time
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from tqdm import tqdm


def translate_generate(
    model,
    tokenizer,
    sentences: list[str],
    *,
    num_beams: int,
    max_new_tokens: int,
    batch_size: int,
    source_prefix: str = "",
    progress: bool = True,
) -> dict[str, Any]:
    """Translate with `model.generate` in batches (PyTorch or an ORTModel); returns hypotheses, token ids, seconds."""
    import torch

    from mtonnx.report.inspection import batch

    hypotheses: list[str] = []
    token_ids: list[list[int]] = []
    start = time.perf_counter()
    chunks = range(0, len(sentences), batch_size)
    for i in tqdm(chunks, desc=f"generate (beams={num_beams})", disable=not progress, leave=False):
        enc = batch(tokenizer, sentences[i : i + batch_size], source_prefix)
        with torch.no_grad():
            out = model.generate(**enc, num_beams=num_beams, max_new_tokens=max_new_tokens)
        token_ids += [_generated(row, model.generation_config.eos_token_id) for row in out.tolist()]
        hypotheses += tokenizer.batch_decode(out, skip_special_tokens=True)
    return {"hypotheses": hypotheses, "token_ids": token_ids, "seconds": time.perf_counter() - start}


def _generated(row: list[int], eos: int) -> list[int]:
    """The generated ids: without the decoder start token, up to and including eos (no padding)."""
    ids = row[1:]
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def score(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """Corpus BLEU (tokenize="zh") and chrF, with sacrebleu's signatures."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(tokenize="zh"), CHRF()
    return {
        "bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
