"""The PyTorch reference: a model's own `generate` (PyTorch, or optimum's ORT model) on padded batches, tokenized
exactly as the rest of the project tokenizes. Its outputs (token ids and text) are the baseline every export and
variant is compared with (report.baseline).
"""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm


def batch(tokenizer, sentences: list[str], source_prefix: str = ""):
    """Tokenize a padded batch exactly as the rest of the project does (prefix, padding=True)."""
    texts = [f"{source_prefix} {s}".strip() for s in sentences]
    return tokenizer(texts, return_tensors="pt", padding=True)


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
