"""The other families: tiny M2M100, NLLB and T5 models built locally, deterministic and not degenerate; their
tokenizers, written torch-free, identical to transformers'; the runtime token-identical with generate (the forced
target-language token included); doctor passing their exports and naming each family's pitfall."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import run_cli
from mtonnx import data
from mtonnx.check import doctor, family_pitfalls
from mtonnx.check.parity import runtime_parity
from mtonnx.runtime import ModelDirError, Translator, families, layout
from mtonnx.runtime.tokenizer import load_tokenizer
from mtonnx.sources import m2m100, models, reference

FAMILY_MODELS = ("tiny-m2m100", "tiny-nllb", "tiny-t5")
SOURCES = [p.en for p in data.eval_set({"hsk_size": 16, "techdocs_size": 8, "eval_split": "test"})]
EDGE_TEXTS = [
    "",
    "   spaced   out ",
    "a </s> b <unk> c <pad> d",
    "x __zh__ y __en__",
    "zho_Hans eng_Latn <mask> here",
    "<extra_id_0> mid <extra_id_12>end",
    "<s>start",
    "Ünïcödé — “quotes” 100% 中文",
]
_loaded: dict = {}


def pytorch(directory):
    """(model, tokenizer) of a built model, loaded once per test session."""
    if directory not in _loaded:
        _loaded[directory] = models.load_pretrained(directory)
    return _loaded[directory]


def family(directory) -> families.Family:
    return families.of_dir(directory)


@pytest.mark.parametrize("name", ["tiny-m2m100", "tiny-t5"])
def test_a_family_model_builds_deterministically(name, family_model, tmp_path):
    again, cached = models.build(name, tmp_path)
    first = family_model(name)
    assert not cached and again.name == first.name
    for path in sorted(first.iterdir()):
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_a_family_model_has_its_family_s_features(name, family_model):
    model, tokenizer = pytorch(family_model(name))
    described = family(family_model(name))
    config, generation = model.config, model.generation_config
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    start = {"pad": config.pad_token_id, "eos": config.eos_token_id}[described.decoder_start]
    assert generation.decoder_start_token_id == start and not generation.bad_words_ids
    if described.forced_first_token:
        convention = described.convention(type(tokenizer).__name__)
        target = convention.language_token.format(convention.target_language)
        assert generation.forced_bos_token_id == tokenizer.convert_tokens_to_ids(target)
        assert config.scale_embedding and config.vocab_size == len(tokenizer.get_vocab()) + m2m100.MADEUP_WORDS
    else:
        assert generation.forced_bos_token_id is None and config.n_positions == 256
        assert len([t for t in tokenizer.get_vocab() if t.startswith("<extra_id_")]) == 100


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_outputs_vary_with_the_input_and_end_at_varied_lengths(name, family_model):
    """A random tiny T5 or M2M100 built naively repeats one token whatever the input; the shaped weights do not."""
    model, tokenizer = pytorch(family_model(name))
    eos, forced = model.config.eos_token_id, model.generation_config.forced_bos_token_id
    special = set(tokenizer.all_special_ids) - {eos}
    for beams in (1, 4):
        rows = reference.translate_generate(
            model,
            tokenizer,
            SOURCES,
            num_beams=beams,
            max_new_tokens=24,
            batch_size=8,
            source_prefix=family(family_model(name)).source_prefix,
            progress=False,
        )["token_ids"]
        bodies = [[t for t in row if t not in (eos, forced)] for row in rows]
        lengths = [len(row) for row in rows]
        assert len(set(lengths)) >= 4 and min(lengths) < 12 and max(lengths) == 24, lengths  # eos mid-way and never
        assert len({tuple(body[:3]) for body in bodies}) >= 0.75 * len(bodies)  # the output depends on the input
        repeats = sum(a == b for body in bodies for a, b in zip(body, body[1:]))
        assert repeats <= 0.6 * sum(len(body) - 1 for body in bodies if body)  # not one token over and over
        assert len({t for body in bodies for t in body}) >= 40
        assert sum(t in special for body in bodies for t in body) <= 0.02 * sum(map(len, bodies))


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_the_runtime_tokenizer_is_transformers_own(name, family_model):
    directory = family_model(name)
    _, expected = pytorch(directory)
    mine = load_tokenizer(directory)
    for text in SOURCES + EDGE_TEXTS:
        assert mine.encode(text) == expected(text).input_ids, text
    rng = np.random.default_rng(0)
    for _ in range(200):
        ids = rng.integers(0, mine.vocab_size, 15).tolist()
        assert mine.decode(ids) == expected.decode(ids, skip_special_tokens=True), ids
    prefix = family(directory).source_prefix
    ids, mask = mine.batch(SOURCES[:5], prefix)
    batch = expected([f"{prefix} {s}".strip() for s in SOURCES[:5]], padding=True, return_tensors="np")
    assert (ids == batch["input_ids"]).all() and (mask == batch["attention_mask"]).all()


@pytest.mark.parametrize("name", FAMILY_MODELS)
@pytest.mark.parametrize("beams", [1, 4], ids=["greedy", "beam4"])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_the_runtime_is_token_identical_with_generate(name, beams, batch_size, family_model, family_export):
    model, tokenizer = pytorch(family_model(name))
    translator = Translator(family_export(name))
    result = runtime_parity(
        translator,
        model,
        tokenizer,
        SOURCES,
        num_beams=beams,
        batch_size=batch_size,
        max_new_tokens=24,
        source_prefix=family(family_model(name)).source_prefix,
    )
    assert result["match"] == 1.0, result["mismatches"]


def test_the_forced_token_comes_first_and_without_it_the_output_changes(family_export):
    translator = Translator(family_export("tiny-m2m100"))
    forced = translator.settings.forced_bos_token_id
    ids, mask = translator.tokenizer.batch(SOURCES[:8])
    for beams in (1, 4):
        right = translator.generate(ids, mask, num_beams=beams, max_new_tokens=12)
        wrong = translator.generate(ids, mask, num_beams=beams, max_new_tokens=12, forced_bos_token_id=None)
        assert {row[0] for row in right} == {forced} and forced not in {row[0] for row in wrong}
    assert translator.tokenizer.decoder[forced] == "__zh__"


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_doctor_passes_a_family_export(name, family_model, family_export):
    rows = doctor.diagnose(family_export(name), source=family_model(name))
    assert [r for r in rows if r["status"] == "fail"] == []
    padding = next(r for r in rows if r["check"] == "padding keeps a sentence's encoding")
    assert padding["status"] == "ok" and padding["evidence"] == "right-padded = batch 1, left-padded = batch 1"


def test_the_doctor_command_passes_a_t5_export(family_model, family_export):
    done = run_cli(
        "doctor", "--model-dir", str(family_export("tiny-t5")), "--source", str(family_model("tiny-t5")), timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr


def reproduce(name: str, pitfall: str, family_model, family_export, tmp_path) -> tuple[dict, dict]:
    """A family pitfall reproduced on a tiny model, and doctor's row of the check that must catch it."""
    directory = family_model(name)
    inputs = family_pitfalls.Inputs(
        directory, family_export(name), tmp_path, SOURCES[:8], family(directory).source_prefix, 12
    )
    chosen = family_pitfalls.PITFALLS[pitfall]
    result = chosen.reproduce(inputs)
    rows = doctor.diagnose(result["export"], source=directory)
    return result, next(r for r in rows if r["check"] == chosen.doctor)


def test_a_removed_forced_token_is_reproduced_and_named(family_model, family_export, tmp_path):
    result, row = reproduce("tiny-m2m100", "forced target-language token", family_model, family_export, tmp_path)
    forced = json.loads((family_model("tiny-m2m100") / "generation_config.json").read_text())["forced_bos_token_id"]
    assert result["reproduced"] and result["evidence"]["first tokens with it"] == ["__zh__"]
    assert row["status"] == "fail" and f"forced_bos_token_id: export None vs model {forced}" in row["evidence"]
    assert "the target-language token is forced first (forced_bos_token_id)" in row["fix"]


def test_positions_that_ignore_the_padding_are_reproduced_and_named(family_model, family_export, tmp_path):
    result, row = reproduce("tiny-m2m100", "positions without the padding", family_model, family_export, tmp_path)
    assert result["reproduced"]
    assert row["status"] == "fail" and row["evidence"].startswith("left-padded: max |diff| / scale")
    assert "right-padded" not in row["evidence"] and "indexed from the ids" in row["evidence"]


def test_a_frozen_position_bias_is_reproduced_and_named(family_model, family_export, tmp_path):
    result, row = reproduce("tiny-t5", "relative position bias frozen", family_model, family_export, tmp_path)
    assert result["reproduced"] and result["evidence"]["source of 7 tokens (traced)"] == "runs"
    assert row["status"] == "fail"
    assert row["evidence"].endswith("the relative position bias was traced at the export sample's length")


def test_a_tied_head_without_the_rescale_is_reproduced_and_named(family_model, family_export, tmp_path):
    result, row = reproduce("tiny-t5", "tied lm_head without the rescale", family_model, family_export, tmp_path)
    assert result["reproduced"] and result["evidence"]["logits / PyTorch's"] == pytest.approx(8.0, rel=1e-3)
    assert row["status"] == "fail" and "the logits are 8 times PyTorch's" in row["evidence"]


def test_a_real_m2m100_without_a_forced_token_is_one_clear_error(family_model, tmp_path):
    copy = tmp_path / "m2m100"
    shutil.copytree(family_model("tiny-m2m100"), copy)
    config = json.loads((copy / "generation_config.json").read_text())
    forced = config.pop("forced_bos_token_id")
    (copy / "generation_config.json").write_text(json.dumps(config))
    with pytest.raises(models.ModelSourceError) as caught:
        models.resolve({"name": "facebook/m2m100_418M", "path": str(copy), "seed": 0}, tmp_path)
    assert str(caught.value) == (
        f"{copy / 'generation_config.json'} has no forced_bos_token_id: M2M100 / NLLB translates into the language "
        f'whose token generate forces first; add "forced_bos_token_id": {forced} (the id of __zh__) to it'
    )


def test_a_t5_directory_without_its_sentencepiece_model_is_one_clear_error(family_model, tmp_path):
    copy = tmp_path / "t5"
    shutil.copytree(family_model("tiny-t5"), copy)
    (copy / "spiece.model").unlink()
    with pytest.raises(models.ModelSourceError, match=r"is missing spiece.model; it must hold a T5 model"):
        models.resolve({"name": "t5-small", "path": str(copy), "seed": 0}, tmp_path)
    with pytest.raises(ModelDirError, match=r"is missing spiece.model: not an exported T5 model directory"):
        Translator(copy)


def test_an_unknown_model_type_is_one_clear_error(family_export, tmp_path):
    copy = tmp_path / "bart"
    shutil.copytree(family_export("tiny-t5"), copy)
    (copy / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "bart"}))
    with pytest.raises(ModelDirError, match=r"model_type 'bart' is not a family mtonnx migrates \(marian, m2m_100, t5"):
        Translator(copy)
