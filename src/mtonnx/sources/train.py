"""Train a small English->Chinese Marian model offline, from data that PyPI packages ship.

The hub is unreachable here, and random weights make every BLEU noise; so the project trains its own
default model: the HSK sentence pairs of `hsk-sentences-audio` (train split only; dev and test held out
by the same hash split the eval sets use) plus the package's per-word glosses as lexicon pairs. The loop
is hand-written (a Trainer would hide the lesson and add dependencies): label smoothing, warm-up +
inverse-sqrt learning rate, length-bucketed batches, periodic dev BLEU, the best checkpoint kept, a
wall-clock budget, deterministic given the recipe's random seed, built in a staging directory and moved into
place at the end.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import re
import time
from pathlib import Path
from typing import Any

from mtonnx import data
from mtonnx.foundation.files import staged_dir
from mtonnx.sources.marian import new_marian
from mtonnx.sources.tokenizer_build import write_marian_tokenizer

RECIPE: dict[str, Any] = {
    "version": 1,
    "data": {"glosses": True, "gloss_max_words": 3},
    "spm": {"source_vocab": 2000, "target_vocab": 2500},
    "model": {
        "d_model": 256,
        "encoder_layers": 3,
        "decoder_layers": 3,
        "attention_heads": 4,
        "ffn_dim": 1024,
        "dropout": 0.1,
        "max_position_embeddings": 128,
    },
    "optim": {"batch_size": 64, "lr": 1e-3, "warmup_steps": 400, "label_smoothing": 0.1, "clip": 1.0},
    "eval": {"every_steps": 500, "dev_sentences": 200, "max_new_tokens": 48},
    "seed": 0,
}
CREDITS = (
    "Training data: the HSK sentence pairs and per-word glosses of hsk-sentences-audio 1.0.0 "
    "(https://github.com/no7z/hsk-sentences-audio), licensed CC-BY-SA-4.0. This model is a derivative "
    "of that data and is shared under CC-BY-SA-4.0 as well."
)


def recipe_hash(recipe: dict[str, Any] = RECIPE) -> str:
    """Hash of everything that decides the trained model (the budget aside)."""
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def lexicon(max_words: int) -> list[tuple[str, str]]:
    """(English gloss, Chinese word) pairs from the glosses of train-split sentences: short first senses only."""
    from hsk_sentences_audio import load_sentences

    train_ids = {p.id for p in data.hsk_split("train")}
    seen: dict[str, str] = {}
    for sentence in load_sentences():
        if sentence["id"] not in train_ids:
            continue
        for token in sentence.get("tokens", []):
            gloss = re.sub(r"\([^)]*\)|\[[^\]]*\]", "", token.get("gloss_en", "")).split(";")[0].strip()
            gloss = gloss.removeprefix("to ").strip(" ,.")
            if gloss and len(gloss.split()) <= max_words and re.fullmatch(r"[A-Za-z' -]+", gloss):
                seen.setdefault(gloss.lower(), token["word"])
    return sorted(seen.items())


def training_pairs(recipe: dict[str, Any]) -> list[tuple[str, str]]:
    """HSK train sentences plus (optionally) the gloss lexicon."""
    pairs = [(p.en, p.zh) for p in data.hsk_split("train")]
    if recipe["data"]["glosses"]:
        pairs += lexicon(recipe["data"]["gloss_max_words"])
    return pairs


def gloss_baseline(sources: list[str], max_words: int) -> list[str]:
    """Word-by-word dictionary translation with the same lexicon: what the model must clearly beat."""
    table = dict(lexicon(max_words))
    out = []
    for sentence in sources:
        words = re.findall(r"[A-Za-z']+", sentence.lower())
        out.append("".join(table.get(w, "") for w in words))
    return out


def build_model(out_dir: Path, recipe: dict[str, Any], pairs: list[tuple[str, str]]):
    """Tokenizer files into out_dir and a fresh seeded MarianMTModel with the real model's features."""
    vocab = write_marian_tokenizer(
        out_dir,
        [en for en, _ in pairs],
        [zh for _, zh in pairs],
        **recipe["spm"],
        model_max_length=recipe["model"]["max_position_embeddings"],
    )
    m = recipe["model"]
    shape = {
        "d_model": m["d_model"],
        "encoder_layers": m["encoder_layers"],
        "decoder_layers": m["decoder_layers"],
        "encoder_attention_heads": m["attention_heads"],
        "decoder_attention_heads": m["attention_heads"],
        "encoder_ffn_dim": m["ffn_dim"],
        "decoder_ffn_dim": m["ffn_dim"],
        "dropout": m["dropout"],
        "max_position_embeddings": m["max_position_embeddings"],
        "max_length": m["max_position_embeddings"],
    }
    return new_marian(shape, vocab["vocab_size"], recipe["seed"])


def _batches(encoded: list[tuple[list[int], list[int]]], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Length-bucketed batches of indices: sort by source length with random tie order, chunk, shuffle."""
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i][0]), rng.random()))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def _collate(rows: list[tuple[list[int], list[int]]], pad: int):
    import torch

    src_len, tgt_len = max(len(s) for s, _ in rows), max(len(t) for _, t in rows)
    input_ids = torch.full((len(rows), src_len), pad)
    attention = torch.zeros((len(rows), src_len), dtype=torch.long)
    labels = torch.full((len(rows), tgt_len), -100)
    decoder_inputs = torch.full((len(rows), tgt_len), pad)
    for i, (source, target) in enumerate(rows):
        input_ids[i, : len(source)], attention[i, : len(source)] = torch.tensor(source), 1
        labels[i, : len(target)] = torch.tensor(target)
        decoder_inputs[i, 1 : len(target)] = torch.tensor(target[:-1])  # shifted right after the start (= pad)
    return input_ids, attention, decoder_inputs, labels


def evaluate_model(model, tokenizer, pairs: list[tuple[str, str]], num_beams: int, max_new_tokens: int) -> dict:
    """BLEU/chrF of the model on pairs (batches of 32)."""
    from mtonnx.scores import score
    from mtonnx.sources.reference import translate_generate

    model.eval()
    run = translate_generate(
        model,
        tokenizer,
        [en for en, _ in pairs],
        num_beams=num_beams,
        max_new_tokens=max_new_tokens,
        batch_size=32,
        progress=False,
    )
    return {**score(run["hypotheses"], [zh for _, zh in pairs]), "hypotheses": run["hypotheses"]}


def train(
    out_dir: str | Path,
    recipe: dict[str, Any] = RECIPE,
    budget_minutes: float = 60.0,
    max_steps: int | None = None,
    max_pairs: int | None = None,
    threads: int = 1,
    test_sentences: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train into `out_dir` (moved into place when done); returns the training report."""
    import torch
    from tqdm import tqdm
    from transformers import MarianTokenizer

    torch.set_num_threads(threads)
    torch.manual_seed(recipe["seed"])
    rng = random.Random(recipe["seed"])
    with staged_dir(out_dir) as tmp:
        pairs = training_pairs(recipe)[:max_pairs] if max_pairs else training_pairs(recipe)
        model = build_model(tmp, recipe, pairs)
        tokenizer = MarianTokenizer.from_pretrained(tmp)
        pad = tokenizer.pad_token_id
        encoded = [(tokenizer(en).input_ids, tokenizer(text_target=zh).input_ids) for en, zh in pairs]
        dev = [(p.en, p.zh) for p in data.hsk_split("dev")][: recipe["eval"]["dev_sentences"]]
        o = recipe["optim"]
        optimizer = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / o["warmup_steps"], math.sqrt(o["warmup_steps"] / (step + 1)))
        )
        loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=o["label_smoothing"])
        start, step, best, history, best_state = time.perf_counter(), 0, -1.0, [], None
        deadline = start + budget_minutes * 60
        bar = tqdm(desc="training", unit="step", disable=not progress)
        done = False
        while not done:
            for batch in _batches(encoded, o["batch_size"], rng):
                model.train()
                input_ids, attention, decoder_inputs, labels = _collate([encoded[i] for i in batch], pad)
                logits = model(input_ids=input_ids, attention_mask=attention, decoder_input_ids=decoder_inputs).logits
                loss = loss_fn(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), o["clip"])
                optimizer.step()
                schedule.step()
                step += 1
                bar.update()
                bar.set_postfix(loss=f"{loss.item():.3f}", best_dev_bleu=f"{best:.1f}")
                out_of_time = time.perf_counter() >= deadline or (max_steps is not None and step >= max_steps)
                if step % recipe["eval"]["every_steps"] == 0 or out_of_time:
                    scores = evaluate_model(model, tokenizer, dev, 1, recipe["eval"]["max_new_tokens"])
                    history.append(
                        {
                            "step": step,
                            "minutes": round((time.perf_counter() - start) / 60, 2),
                            "loss": round(loss.item(), 4),
                            "dev_bleu": scores["bleu"],
                            "dev_chrf": scores["chrf"],
                        }
                    )
                    if scores["bleu"] > best:
                        best, best_state = scores["bleu"], copy.deepcopy(model.state_dict())
                if out_of_time:
                    done = True
                    break
        bar.close()
        minutes = (time.perf_counter() - start) / 60
        model.load_state_dict(best_state)
        model.eval()
        report = finish(tmp, model, tokenizer, recipe, history, minutes, step, test_sentences)
    return report


def finish(
    directory: Path,
    model,
    tokenizer,
    recipe: dict[str, Any],
    history: list[dict],
    minutes: float,
    steps: int,
    test_sentences: int | None = None,
) -> dict[str, Any]:
    """Score the best checkpoint on the held-out test split, save it small, write the model card."""
    test = [(p.en, p.zh) for p in data.hsk_split("test")][: test_sentences or None]
    greedy = evaluate_model(model, tokenizer, test, 1, recipe["eval"]["max_new_tokens"])
    beam = evaluate_model(model, tokenizer, test, 4, recipe["eval"]["max_new_tokens"])
    from mtonnx.scores import score

    baseline = score(gloss_baseline([en for en, _ in test], recipe["data"]["gloss_max_words"]), [zh for _, zh in test])
    size_fp32 = sum(p.numel() for p in model.parameters()) * 4 / 2**20
    if size_fp32 > 20:
        model = model.half()  # stored in fp16 to stay small; from_pretrained loads it back as fp32
    model.save_pretrained(directory)
    report = {
        "recipe_hash": recipe_hash(recipe),
        "recipe": recipe,
        "train_minutes": round(minutes, 1),
        "steps": steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "stored_dtype": str(next(model.parameters()).dtype),
        "test_bleu": greedy["bleu"],
        "test_chrf": greedy["chrf"],
        "test_bleu_beam": beam["bleu"],
        "test_chrf_beam": beam["chrf"],
        "baseline_bleu": baseline["bleu"],
        "baseline_chrf": baseline["chrf"],
        "bleu_signature": greedy["bleu_signature"],
        "history": history,
        "examples": [{"en": en, "reference": zh, "model": hyp} for (en, zh), hyp in zip(test[:8], beam["hypotheses"])],
        **domains(model, tokenizer, per_source=test_sentences),
    }
    (directory / "training_report.json").write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    (directory / "README.md").write_text(model_card(report), encoding="utf-8")
    return report


def domains(
    model, tokenizer, max_new_tokens: int = 64, batch_size: int = 8, per_source: int | None = None
) -> dict[str, Any]:
    """Beam-search BLEU/chrF in domain (the whole HSK test split) and out of domain (every tech-doc sentence), or
    the first `per_source` of each, with the two best and two worst translations of each: what the model can and
    cannot do (the default params' generation settings, as notebook 01 scores it)."""
    from mtonnx.scores import best_and_worst, by_source
    from mtonnx.sources.reference import translate_generate

    size = per_source or "all"
    pairs = data.eval_set({"hsk_size": size, "techdocs_size": size, "eval_split": "test"})
    run = translate_generate(
        model,
        tokenizer,
        [p.en for p in pairs],
        num_beams=4,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        progress=False,
    )
    return {
        "domains": by_source([p.source for p in pairs], run["hypotheses"], [p.zh for p in pairs]),
        "domain_examples": best_and_worst(pairs, run["hypotheses"], count=2),
    }


def model_card(report: dict[str, Any]) -> str:
    """The model's README: what it is, data and license, recipe, training time, scores, minutes -> dev BLEU."""
    rows = "\n".join(
        f"| {h['minutes']} | {h['step']} | {h['loss']} | {h['dev_bleu']} | {h['dev_chrf']} |" for h in report["history"]
    )
    examples = "\n".join(f"| {e['en']} | {e['reference']} | {e['model']} |" for e in report["examples"])
    m = report["recipe"]["model"]
    shape = f"{m['d_model']}-d, {m['encoder_layers']}+{m['decoder_layers']} layers"
    domain_rows = "\n".join(
        f"| {name} | {d['sentences']} | {d['bleu']} | {d['chrf']} |" for name, d in report.get("domains", {}).items()
    )
    typical = "\n".join(
        f"| {e['source']} | {e['kind']} | {e['chrf']} | {e['en']} | {e['reference']} | {e['model']} |"
        for e in report.get("domain_examples", [])
    )
    return f"""# hsk-enzh: a small English->Chinese Marian model trained by mtonnx

Trained offline by `python -m mtonnx train` (`make model`) so that the project's default reports translate for
real. Same architecture features as Helsinki-NLP/opus-mt-en-zh (swish, sinusoidal positions, scaled, shared and
tied embeddings, pad = decoder_start, eos 0, pad banned, beam 4), at {shape},
{report["parameters"]:,} parameters (stored as {report["stored_dtype"]}). It knows HSK-level everyday Chinese, not
technical documentation.

{CREDITS}

Recipe hash: `{report["recipe_hash"]}` (tests check it against the recipe in `src/mtonnx/sources/train.py`).
Training: {report["steps"]} steps in {report["train_minutes"]} minutes on one CPU core.

## Held-out test split (HSK, sacrebleu, tokenize="zh")

| system | BLEU | chrF |
| --- | --- | --- |
| this model, greedy | {report["test_bleu"]} | {report["test_chrf"]} |
| this model, beam 4 | {report["test_bleu_beam"]} | {report["test_chrf_beam"]} |
| word-by-word gloss baseline (same lexicon) | {report["baseline_bleu"]} | {report["baseline_chrf"]} |

Signature: `{report["bleu_signature"]}`

## What it knows: in domain and out of domain (beam 4)

It was trained on about 4,000 graded HSK sentence pairs: short, everyday sentences. It handles those and fails on
almost everything else, such as the project's technical-documentation sentences, which it never saw. These limits
are the model's, not the migration's: every export and variant the lab builds is compared with this same model.

| source | sentences | BLEU | chrF |
| --- | --- | --- | --- |
{domain_rows}

Its best and worst translations per source, by sentence chrF (out of domain even the best are wrong):

| source | | chrF | English | reference | model |
| --- | --- | --- | --- | --- | --- |
{typical}

## What each budget bought (dev split, greedy)

| minutes | step | train loss | dev BLEU | dev chrF |
| --- | --- | --- | --- | --- |
{rows}

## Examples (test split, beam 4)

| English | reference | model |
| --- | --- | --- |
{examples}
"""
