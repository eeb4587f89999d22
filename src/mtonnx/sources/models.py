"""Model sources: turn a params `model:` block into a HuggingFace-format model directory.

Every later step loads that directory with `from_pretrained`, exactly as it would load the real
model. Sources:
- `tiny`: a seeded random MarianMTModel with opus-mt-en-zh's architecture features, tiny sizes;
- `tiny-m2m100`, `tiny-nllb`, `tiny-t5`: the same for the other families (runtime.families): m2m100_418M's
  architecture with M2M100's or NLLB's tokenizer, t5-small's with T5's, their weights shaped so that a random model's
  outputs vary with the input and end at varied lengths;
- `opus-shape`: opus-mt-en-zh's exact config with random weights (speed and size at real scale);
- `hsk-enzh`: the small model `mtonnx train` trained from packaged data, committed under the project root's
  models/ (the root comes from the params: `project_root`, or $MTONNX_PROJECT_ROOT);
- anything else: a hub name (e.g. Helsinki-NLP/opus-mt-en-zh, facebook/m2m100_418M, t5-small) or, with `path`, a
  local copy.
Built models are cached under `<cache>/<name>-<recipe hash>/`, built in a staging directory first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from mtonnx import data
from mtonnx.foundation.files import staged_dir
from mtonnx.runtime import families
from mtonnx.sources import m2m100, t5
from mtonnx.sources.marian import OPUS_MT_EN_ZH, new_marian
from mtonnx.sources.tokenizer_build import write_m2m100_tokenizer, write_marian_tokenizer, write_t5_tokenizer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# The real model whose config each family's recipes start from (a recipe's "family" key; Marian when it has none).
BASES = {"marian": OPUS_MT_EN_ZH, "m2m_100": m2m100.M2M100_418M, "t5": t5.T5_SMALL}

TINY_M2M100 = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "max_position_embeddings": 256,
    "init_std": 2.0,
}
# name -> (its family, config overrides on the family's base, sentencepiece sizes, how the weights are shaped)
RECIPES: dict[str, dict[str, Any]] = {
    "tiny": {
        "config": {
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "max_position_embeddings": 256,
            "max_length": 256,
            # Large random weights make outputs depend on the input, and an eos bias makes lengths vary,
            # so parity tests meet early stops, finished beams and padding, not only runs to max length.
            "init_std": 0.3,
        },
        "spm": {"source_vocab": 1000, "target_vocab": 2000, "pad_vocab_to": None},
        "eos_logit_bias": 8.0,
    },
    "opus-shape": {
        "config": {},
        "spm": {"source_vocab": 1000, "target_vocab": 2000, "pad_vocab_to": OPUS_MT_EN_ZH["vocab_size"]},
        "eos_logit_bias": 0.0,
    },
    **{
        f"tiny-{name}": {
            "family": "m2m_100",
            "tokenizer": tokenizer,
            "config": TINY_M2M100,
            "spm": {"vocab_size": 3000},
            # init_std 2.0, the table shrunk to 0.2 of it and eos's logit raised by 7.5 (m2m100.shape_weights): outputs
            # vary with the input, few repeat a token, lengths spread from 1 to the limit (tests/test_families.py)
            "shape": {"embedding_scale": 0.2, "eos_logit_bias": 7.5},
        }
        for name, tokenizer in (("m2m100", "M2M100Tokenizer"), ("nllb", "NllbTokenizer"))
    },
    "tiny-t5": {
        "family": "t5",
        "tokenizer": "T5Tokenizer",
        "config": {
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 128,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "num_heads": 4,
            "n_positions": 256,
            "initializer_factor": 5.0,  # with the table shrunk to 0.1 and eos's row twice as long (t5.shape_weights)
        },
        "spm": {"vocab_size": 3000},
        "shape": {"embedding_scale": 0.1, "eos_row_scale": 2.0},
    },
}
RECIPE_VERSION = 2  # bump when the build code changes what it writes
# Models trained by `mtonnx train` and committed under <project root>/models/ (the default is one of them).
TRAINED = ("hsk-enzh",)


# A hub id: a name, or an organisation and a name, without path syntax (no leading . / ~, at most one slash).
HUB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)?")


class ModelSourceError(RuntimeError):
    """A model that cannot be found or loaded; str() says what to do."""


def default_models_dir() -> Path:
    """Where built models are cached: $MTONNX_MODELS_DIR, else outputs/models under the current dir."""
    return Path(os.environ.get("MTONNX_MODELS_DIR", "outputs/models")).resolve()


def resolve(
    model_params: dict[str, Any], cache_dir: str | Path, project_root: str | Path | None = None
) -> dict[str, Any]:
    """Return {"dir", "name", "source", "cached", "seconds"} for a validated `model:` block (`project_root`: where
    the trained models are, params["_root"])."""
    start = time.perf_counter()
    name = model_params["name"]
    if model_params.get("path"):
        directory, source, cached = check_model_dir(Path(model_params["path"])), "local", True
    elif name in RECIPES:
        directory, cached = build(name, Path(cache_dir), seed=model_params.get("seed", 0))
        source = "built"
    elif name in TRAINED:
        directory, source, cached = check_model_dir(trained_dir(name, project_root)), "trained", True
    else:
        directory, source, cached = _from_hub(name), "hub", True
    return {
        "name": name,
        "dir": str(directory),
        "source": source,
        "cached": cached,
        "seconds": round(time.perf_counter() - start, 2),
    }


def trained_dir(name: str, project_root: str | Path | None) -> Path:
    """<project root>/models/<name>, checked; one clear error when the root is unknown or the model missing."""
    if project_root is None:
        raise ModelSourceError(
            f"model '{name}' lives under the project's models/ folder: give the project root "
            "(params key `project_root`, or $MTONNX_PROJECT_ROOT)"
        )
    directory = Path(project_root) / "models" / name
    if not (directory / "config.json").is_file():
        raise ModelSourceError(
            f"trained model {directory} is missing: run `make model` to train it, or point "
            "`project_root` ($MTONNX_PROJECT_ROOT) at the checkout that holds models/"
        )
    return directory


def recipe_hash(name: str, seed: int) -> str:
    """A hash of everything that determines a built model's files."""
    base = BASES[RECIPES[name].get("family", "marian")]
    recipe = {"name": name, "seed": seed, "version": RECIPE_VERSION, "base": base, **RECIPES[name]}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]


def build(name: str, cache_dir: Path, seed: int = 0) -> tuple[Path, bool]:
    """Build a recipe's model into the cache unless already there; returns (directory, was_cached)."""
    target = cache_dir / f"{name}-{recipe_hash(name, seed)}"
    if (target / "config.json").is_file():
        return target, True
    recipe = RECIPES[name]
    builders = {"marian": build_random_marian, "m2m_100": build_random_m2m100, "t5": build_random_t5}
    with staged_dir(target, keep_existing=True) as tmp:  # a concurrent builder's identical result may be there
        builders[recipe.get("family", "marian")](tmp, recipe, seed)
    return target, False


def build_random_marian(out_dir: Path, recipe: dict[str, Any], seed: int) -> dict[str, Any]:
    """Write tokenizer files and a seeded random-weight MarianMTModel into `out_dir`."""
    import torch

    train = data.hsk_split("train")
    vocab = write_marian_tokenizer(
        out_dir,
        [p.en for p in train],
        [p.zh for p in train],
        **recipe["spm"],
        model_max_length=recipe["config"].get("max_position_embeddings", 512),
    )
    model = new_marian(recipe["config"], vocab["vocab_size"], seed).eval()
    with torch.no_grad():
        # Non-zero so that an export or a decoding loop that drops final_logits_bias is caught.
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, model.config.eos_token_id] += recipe["eos_logit_bias"]
    model.save_pretrained(out_dir)
    c = model.config
    (out_dir / "README.md").write_text(
        f"# Random-weight Marian ({c.d_model}d, {c.encoder_layers}+{c.decoder_layers} layers, vocab {c.vocab_size})"
        f"\n\nBuilt by mtonnx (random seed {seed}); weights are random, so translations are noise. Tokenizers "
        "trained on the HSK train split of hsk-sentences-audio (CC-BY-SA-4.0).\n",
        encoding="utf-8",
    )
    return vocab


def build_random_m2m100(out_dir: Path, recipe: dict[str, Any], seed: int) -> dict[str, Any]:
    """Write an M2M100 or NLLB tokenizer and a seeded random-weight M2M100ForConditionalGeneration into `out_dir`."""
    train = data.hsk_split("train")
    convention = families.M2M100.convention(recipe["tokenizer"])
    positions = recipe["config"]["max_position_embeddings"]
    texts = [p.en for p in train] + [p.zh for p in train]
    facts = write_m2m100_tokenizer(out_dir, texts, recipe["spm"]["vocab_size"], positions, convention)
    model = m2m100.new_m2m100(recipe["config"], facts["vocab_size"], facts["target_language_id"], seed).eval()
    unused = [i for i in facts["special_ids"] if i not in (facts["eos_id"], facts["pad_id"])]
    m2m100.shape_weights(model, **recipe["shape"], unused_ids=unused + list(range(facts["vocab_size"], _rows(model))))
    _save(model, out_dir, convention.classes[0], seed)
    return facts


def build_random_t5(out_dir: Path, recipe: dict[str, Any], seed: int) -> dict[str, Any]:
    """Write a T5 tokenizer (trained on English with the task prefix and Chinese) and a seeded random-weight
    T5ForConditionalGeneration into `out_dir`."""
    train = data.hsk_split("train")
    convention = families.T5.convention(recipe["tokenizer"])
    texts = [f"{families.T5.source_prefix} {p.en}" for p in train] + [p.zh for p in train]
    facts = write_t5_tokenizer(out_dir, texts, recipe["spm"]["vocab_size"], recipe["config"]["n_positions"], convention)
    model = t5.new_t5(recipe["config"], facts["vocab_size"], seed).eval()
    unused = [i for i in facts["special_ids"] if i not in (facts["eos_id"], facts["pad_id"])]
    t5.shape_weights(model, **recipe["shape"], unused_ids=unused)
    _save(model, out_dir, convention.classes[0], seed)
    return facts


def _rows(model) -> int:
    return model.get_input_embeddings().weight.shape[0]


def _save(model, out_dir: Path, tokenizer: str, seed: int) -> None:
    """The model's files and a README saying what it is (`tokenizer`: the transformers class that wrote its
    tokenizer files)."""
    model.save_pretrained(out_dir)
    c = model.config
    family = families.of_type(c.model_type)
    layers = f"{c.get_text_config().num_hidden_layers}+{getattr(c, family.decoder_layers)} layers"
    (out_dir / "README.md").write_text(
        f"# Random-weight {family.label} ({c.d_model}d, {layers}, vocab {c.vocab_size})\n\nBuilt by mtonnx (random "
        f"seed {seed}); weights are random, so translations are noise. {tokenizer} trained on the HSK train split of "
        "hsk-sentences-audio (CC-BY-SA-4.0).\n",
        encoding="utf-8",
    )


def training_report(directory: str | Path) -> dict[str, Any] | None:
    """The training_report.json `mtonnx train` leaves beside a trained model (None for other models)."""
    path = Path(directory) / "training_report.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def load_pretrained(directory: str | Path):
    """(model in eval mode, tokenizer) from a resolved model directory: the family's transformers classes
    (runtime.families; the slow tokenizer, the one the runtime's mirrors)."""
    import transformers

    family, convention = families.convention_of_dir(directory)
    model = getattr(transformers, family.architecture).from_pretrained(directory).eval()
    return model, getattr(transformers, convention.classes[0]).from_pretrained(directory)


def check_model_dir(directory: Path) -> Path:
    """A local model directory, checked for the files its family needs (and, for a family that forces the
    target-language token first, that its generation_config.json says which)."""
    if directory.exists() and not directory.is_dir():
        raise ModelSourceError(f"{directory} is a file, not a model directory: give the directory that holds it")
    if not directory.is_dir():
        raise ModelSourceError(f"model directory {directory} does not exist")
    try:
        family, convention = families.convention_of_dir(directory)
    except ValueError as err:
        raise ModelSourceError(f"model directory {directory}: {err}") from None
    missing = sorted(f for f in ("config.json", *convention.files) if not (directory / f).is_file())
    if not any((directory / f).is_file() for f in WEIGHT_FILES):
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        raise ModelSourceError(
            f"model directory {directory} is missing {', '.join(missing)}; it must hold a {family.label} model "
            "saved with save_pretrained (model and tokenizer)"
        )
    generation = families.read_json(directory / "generation_config.json")
    if family.forced_first_token and generation.get("forced_bos_token_id") is None:
        from mtonnx.runtime.tokenizer import load_tokenizer

        token = convention.language_token.format(convention.target_language)
        raise ModelSourceError(
            f"{directory / 'generation_config.json'} has no forced_bos_token_id: {family.label} translates into the "
            f'language whose token generate forces first; add "forced_bos_token_id": '
            f"{load_tokenizer(directory).encoder[token]} (the id of {token}) to it"
        )
    return directory


def _from_hub(name: str) -> Path:
    """A hub model from the local cache, else downloaded; one clear error when neither works."""
    from huggingface_hub import snapshot_download

    if not HUB_NAME.fullmatch(name):  # a path (absolute, relative, ~) that does not exist, never a hub id
        raise ModelSourceError(f"model directory {name} does not exist (and it is not a hub name such as org/model)")
    patterns = ["*.json", "*.spm", "*.model", "*.safetensors", "*.txt", "*.md"]
    try:
        return check_model_dir(Path(snapshot_download(name, local_files_only=True, allow_patterns=patterns)))
    except Exception:  # not in the cache (or incomplete): try the hub below
        pass
    try:
        return check_model_dir(Path(snapshot_download(name, allow_patterns=patterns)))
    except Exception as err:  # any hub or network failure ends in the one message below
        reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise ModelSourceError(
            f"model '{name}' is not in the local Hugging Face cache and the hub could not be reached "
            f"({type(err).__name__}: {reason}). Fix: on a machine with internet access run "
            f'`python -c "from transformers import AutoModelForSeq2SeqLM as M, AutoTokenizer as T; '
            f"m='{name}'; d='{name.split('/')[-1]}'; M.from_pretrained(m).save_pretrained(d); "
            f'T.from_pretrained(m).save_pretrained(d)"`, copy that folder here and set `model.path` '
            "to it in your params file."
        ) from None
