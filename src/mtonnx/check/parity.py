"""Proof that exported files compute what PyTorch computes.

- `check_files`: onnx.checker and shape inference on each file; the ORT session's I/O next to the manifest.
- `parity`: max |ONNX - PyTorch| of every output, per file, at shape combinations the export never saw.
- `greedy_tokens`: a plain greedy loop over the exported encoder / decoder / decoder-with-past files,
  to compare token ids with PyTorch's greedy `generate` (the full runtime comes later).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

from mtonnx.export import MANIFEST, past_names, subgraphs
from mtonnx.runtime.sessions import make_session


@dataclass(frozen=True)
class Case:
    """One shape combination: source lengths per row (padded to the longest), decoder prefix, past length."""

    name: str
    source_lengths: tuple[int, ...]
    target: int
    past: int


# None of these equals the export sample (batch 2, source 7, target 3, past 4).
CASES = (
    Case("b1 src5 tgt1 past1", (5,), 1, 1),
    Case("b3 src37/12/5 tgt4 past20", (37, 12, 5), 4, 20),
    Case("b1 src37 tgt2 past20", (37,), 2, 20),
)


def session(path: str | Path) -> ort.InferenceSession:
    """A one-thread CPU session without spinning (the runtime's defaults)."""
    return make_session(path)


def session_io(sess: ort.InferenceSession) -> dict[str, list[dict[str, Any]]]:
    """What ONNX Runtime reports for a session's inputs and outputs, in the manifest's format."""
    def describe(args):
        return [{"name": a.name, "dtype": _ort_dtype(a.type), "shape": list(a.shape)} for a in args]

    return {"inputs": describe(sess.get_inputs()), "outputs": describe(sess.get_outputs())}


def _ort_dtype(ort_type: str) -> str:
    name = ort_type.removeprefix("tensor(").removesuffix(")")
    return {"float": "float32", "double": "float64", "float16": "float16"}.get(name, name)


def check_files(export_dir: str | Path) -> list[dict[str, Any]]:
    """Per file: checker and shape inference pass, and whether the ORT session's I/O equals the manifest."""
    import json

    export_dir = Path(export_dir)
    manifest = json.loads((export_dir / MANIFEST).read_text())
    rows = []
    for name, entry in manifest["files"].items():
        path = export_dir / name
        onnx.checker.check_model(str(path), full_check=True)
        inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path)), strict_mode=True)
        io = session_io(session(path))
        rows.append({
            "file": name,
            "checker": "ok",
            "shape inference": f"ok ({len(inferred.graph.value_info)} intermediate shapes)",
            "inputs": len(io["inputs"]),
            "outputs": len(io["outputs"]),
            "session I/O == manifest": io == {k: entry[k] for k in ("inputs", "outputs")},
            "size_mb": round(path.stat().st_size / 2**20, 2),
        })
    return rows


class _Inputs:
    """Random token ids for one case, and PyTorch's outputs for every subgraph on them."""

    def __init__(self, model, case: Case, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        config = model.config
        vocab, start, eos = config.vocab_size, config.decoder_start_token_id, config.eos_token_id
        batch, longest = len(case.source_lengths), max(case.source_lengths)
        self.input_ids = torch.full((batch, longest), config.pad_token_id)
        self.attention_mask = torch.zeros(batch, longest, dtype=torch.int64)
        for row, length in enumerate(case.source_lengths):
            self.input_ids[row, :length] = torch.randint(2, vocab - 1, (length,), generator=generator)
            self.input_ids[row, length - 1] = eos
            self.attention_mask[row, :length] = 1
        self.decoder_input_ids = torch.randint(2, vocab - 1, (batch, case.target), generator=generator)
        self.decoder_input_ids[:, 0] = start
        prefix = torch.randint(2, vocab - 1, (batch, case.past), generator=generator)
        prefix[:, 0] = start
        self.next_token = torch.randint(2, vocab - 1, (batch, 1), generator=generator)
        decoder = model.get_decoder()
        with torch.no_grad():
            self.hidden = model.get_encoder()(self.input_ids, self.attention_mask).last_hidden_state
            first = decoder(input_ids=self.decoder_input_ids, encoder_hidden_states=self.hidden,
                            encoder_attention_mask=self.attention_mask, use_cache=True)
            self.first = (_logits(model, first.last_hidden_state), *_flat(first.past_key_values))
            warm = decoder(input_ids=prefix, encoder_hidden_states=self.hidden,
                           encoder_attention_mask=self.attention_mask, use_cache=True)
            self.past = _flat(warm.past_key_values)
            step = decoder(input_ids=self.next_token, encoder_hidden_states=self.hidden,
                           encoder_attention_mask=self.attention_mask, past_key_values=warm.past_key_values,
                           use_cache=True)
            self.step = (_logits(model, step.last_hidden_state), *_flat(step.past_key_values, self_only=True))
            self.full = model(input_ids=self.input_ids, attention_mask=self.attention_mask,
                              decoder_input_ids=self.decoder_input_ids, use_cache=False).logits

    def feeds_and_expected(self, file: str, layers: int) -> tuple[dict[str, np.ndarray], list[torch.Tensor]]:
        ids, mask = self.input_ids.numpy(), self.attention_mask.numpy()
        if file == "encoder_model.onnx":
            return {"input_ids": ids, "attention_mask": mask}, [self.hidden]
        if file == "decoder_model.onnx":
            return ({"input_ids": self.decoder_input_ids.numpy(), "encoder_hidden_states": self.hidden.numpy(),
                     "encoder_attention_mask": mask}, list(self.first))
        if file == "decoder_with_past_model.onnx":
            names = past_names(layers)
            feeds = {"input_ids": self.next_token.numpy(), "encoder_attention_mask": mask}
            feeds.update({n: t.numpy() for n, t in zip(names, self.past)})
            return feeds, list(self.step)
        if file == "translation_step.onnx":
            return ({"input_ids": ids, "attention_mask": mask, "decoder_input_ids": self.decoder_input_ids.numpy()},
                    [self.full])
        raise ValueError(f"no parity inputs for {file}")


def _logits(model, hidden: torch.Tensor) -> torch.Tensor:
    return model.lm_head(hidden) + model.final_logits_bias


def _flat(cache, self_only: bool = False) -> list[torch.Tensor]:
    return [t for layer in cache.to_legacy_cache() for t in (layer[:2] if self_only else layer)]


def parity(model, export_dir: str | Path, tolerance: float = 1e-4, cases: tuple[Case, ...] = CASES,
           files: list[str] | None = None) -> dict[str, Any]:
    """Max absolute difference of every output vs PyTorch, per file and case; pass when all <= tolerance."""
    export_dir = Path(export_dir)
    files = files or sorted(p.name for p in export_dir.glob("*.onnx"))
    layers = model.config.decoder_layers
    inputs = {case.name: _Inputs(model, case) for case in cases}
    result: dict[str, Any] = {"tolerance": tolerance, "files": {}}
    outputs = {spec.file: spec.outputs for spec in subgraphs(layers)}
    for file in files:
        sess = session(export_dir / file)
        per_case = {}
        for case in cases:
            feeds, expected = inputs[case.name].feeds_and_expected(file, layers)
            got = sess.run(outputs[file], feeds)  # by name: optimum's files order their outputs differently
            diffs = [float(np.abs(g - e.numpy()).max()) for g, e in zip(got, expected)]
            worst = int(np.argmax(diffs))
            per_case[case.name] = {"max_abs_diff": diffs[worst], "worst_output": outputs[file][worst],
                                   "outputs": len(got), "pass": diffs[worst] <= tolerance}
        result["files"][file] = {
            "cases": per_case,
            "max_abs_diff": max(c["max_abs_diff"] for c in per_case.values()),
            "pass": all(c["pass"] for c in per_case.values()),
        }
    result["pass"] = all(f["pass"] for f in result["files"].values())
    return result


def parity_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The parity result as table rows (file, case, max diff, worst output, pass)."""
    return [
        {"file": file, "case": case, "max_abs_diff": c["max_abs_diff"], "worst output": c["worst_output"],
         "pass": c["pass"]}
        for file, entry in result["files"].items() for case, c in entry["cases"].items()
    ]


def greedy_tokens(export_dir: str | Path, input_ids: np.ndarray, attention_mask: np.ndarray, *,
                  decoder_start: int, eos: int, pad: int, banned: list[int], max_new_tokens: int,
                  layers: int) -> list[list[int]]:
    """Greedy decoding over the exported files with HF generate's rules: bad words banned, eos forced last.

    Deliberately plain (one batch, numpy): it checks the files; the runtime issue builds the real decoder.
    """
    export_dir = Path(export_dir)
    encoder = session(export_dir / "encoder_model.onnx")
    first = session(export_dir / "decoder_model.onnx")
    with_past = session(export_dir / "decoder_with_past_model.onnx")
    hidden = encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]
    batch = input_ids.shape[0]
    token = np.full((batch, 1), decoder_start, dtype=np.int64)
    logits, *present = first.run(None, {"input_ids": token, "encoder_hidden_states": hidden,
                                        "encoder_attention_mask": attention_mask})
    cross = [t for i, t in enumerate(present) if i % 4 >= 2]  # computed once, reused every step
    self_kv = [t for i, t in enumerate(present) if i % 4 < 2]
    names = past_names(layers)
    done = np.zeros(batch, dtype=bool)
    generated: list[np.ndarray] = []
    for step in range(max_new_tokens):
        scores = logits[:, -1, :].copy()
        scores[:, banned] = -np.inf  # bad_words_ids: Marian bans pad
        if step == max_new_tokens - 1:  # forced_eos_token_id: the last allowed token is eos
            scores[:, :] = -np.inf
            scores[:, eos] = 0.0
        token = np.where(done, pad, scores.argmax(-1)).astype(np.int64)
        generated.append(token)
        done |= token == eos
        if done.all():
            break
        past = [kv for layer in range(layers) for kv in (*self_kv[2 * layer : 2 * layer + 2], *cross[2 * layer : 2 * layer + 2])]
        feeds = {"input_ids": token[:, None], "encoder_attention_mask": attention_mask, **dict(zip(names, past))}
        logits, *self_kv = with_past.run(None, feeds)
    rows = np.stack(generated, axis=1).tolist()
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def greedy_match(export_dir: str | Path, tokenizer, sources: list[str], expected: list[list[int]], *,
                 generation_config, max_new_tokens: int, batch_size: int, layers: int,
                 source_prefix: str = "") -> dict[str, Any]:
    """Fraction of sentences whose greedy token ids over the export equal `expected` (PyTorch's)."""
    from mtonnx.inspection import batch

    got: list[list[int]] = []
    for i in range(0, len(sources), batch_size):
        enc = batch(tokenizer, sources[i : i + batch_size], source_prefix)
        got += greedy_tokens(export_dir, enc.input_ids.numpy(), enc.attention_mask.numpy(),
                             decoder_start=generation_config.decoder_start_token_id,
                             eos=generation_config.eos_token_id, pad=generation_config.pad_token_id,
                             banned=[w[0] for w in generation_config.bad_words_ids or [] if len(w) == 1],
                             max_new_tokens=max_new_tokens, layers=layers)
    return {**token_match(got, expected), "token_ids": got}


def token_match(got: list[list[int]], expected: list[list[int]]) -> dict[str, Any]:
    """Fraction of sentences with identical token ids, and the first mismatches."""
    if len(got) != len(expected):
        raise ValueError(f"{len(got)} outputs for {len(expected)} expected")
    mismatches = [{"index": i, "expected": e, "got": g} for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    return {"match": 1 - len(mismatches) / max(len(expected), 1), "sentences": len(expected),
            "mismatches": mismatches[:5]}


def runtime_parity(translator, model, tokenizer, sources: list[str], *, num_beams: int, batch_size: int,
                   max_new_tokens: int, source_prefix: str = "") -> dict[str, Any]:
    """The runtime's token ids vs PyTorch `generate` on the same padded batches and settings."""
    from mtonnx.evaluate import translate_generate
    from mtonnx.inspection import batch

    expected = translate_generate(model, tokenizer, sources, num_beams=num_beams, max_new_tokens=max_new_tokens,
                                  batch_size=batch_size, source_prefix=source_prefix, progress=False)["token_ids"]
    got: list[list[int]] = []
    for i in range(0, len(sources), batch_size):
        enc = batch(tokenizer, sources[i : i + batch_size], source_prefix)
        got += translator.generate(enc.input_ids.numpy(), enc.attention_mask.numpy(), num_beams=num_beams,
                                   max_new_tokens=max_new_tokens)
    return token_match(got, expected)
