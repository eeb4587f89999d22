"""Model sources: the tiny model has opus-mt-en-zh's features, builds deterministically and atomically;
opus-shape matches the real config; a hub model that cannot be reached is one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import REPO, cli_env, run_cli
from mtonnx.sources import models

REAL_CONFIG = Path(__file__).parent / "data" / "opus-mt-en-zh" / "config.json"
# Fields of the 2020 conversion that today's MarianConfig no longer reads.
LEGACY_FIELDS = {"extra_pos_embeddings", "classif_dropout", "add_bias_logits"}
METADATA_FIELDS = {"_name_or_path", "transformers_version", "torch_dtype", "architectures", "id2label", "label2id"}


def test_tiny_has_the_real_architecture_features(tiny):
    model, tokenizer = tiny
    config, generation = model.config, model.generation_config
    assert config.activation_function == "swish"
    assert config.scale_embedding and config.static_position_embeddings and config.share_encoder_decoder_embeddings
    shared = model.model.shared.weight.data_ptr()
    assert model.lm_head.weight.data_ptr() == shared
    assert model.model.encoder.embed_tokens.weight.data_ptr() == shared
    assert model.model.decoder.embed_tokens.weight.data_ptr() == shared
    assert not model.model.decoder.embed_positions.weight.requires_grad  # static sinusoidal table
    assert model.final_logits_bias.abs().max() > 0
    pad = tokenizer.vocab_size - 1
    assert config.pad_token_id == config.decoder_start_token_id == tokenizer.pad_token_id == pad
    assert config.eos_token_id == tokenizer.eos_token_id == 0
    assert generation.bad_words_ids == [[pad]] and generation.num_beams == 4
    assert config.d_model <= 128 and config.encoder_layers == config.decoder_layers == 2
    assert 1000 <= tokenizer.vocab_size <= 10000


def test_tiny_reloads_tokenizes_with_prefix_and_generates(tiny):
    model, tokenizer = tiny
    enc = tokenizer([">>cmn_Hans<< Run the command.", "Hello, teacher!"], return_tensors="pt", padding=True)
    assert tokenizer.convert_ids_to_tokens(enc.input_ids[0])[0] == ">>cmn_Hans<<"
    assert enc.input_ids[0, -1].item() == tokenizer.eos_token_id
    assert enc.attention_mask[1].sum() < enc.attention_mask[0].sum()  # padded
    with torch.no_grad():
        out = model.generate(**enc, num_beams=1, max_new_tokens=8)
    assert out.shape[0] == 2 and 2 <= out.shape[1] <= 9
    assert (out[:, 0] == model.config.decoder_start_token_id).all()
    assert len(tokenizer.batch_decode(out, skip_special_tokens=True)) == 2


def test_tiny_build_is_deterministic(tmp_path, tiny_dir):
    again, cached = models.build("tiny", tmp_path)
    assert not cached and again.name == tiny_dir.name
    for path in sorted(tiny_dir.iterdir()):
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name


def test_resolve_reuses_the_cache(models_dir, tiny_dir):
    info = models.resolve({"name": "tiny", "path": None, "seed": 0}, models_dir)
    assert info["cached"] and Path(info["dir"]) == tiny_dir and info["source"] == "built"
    assert models.recipe_hash("tiny", 1) != models.recipe_hash("tiny", 0)


def test_interrupted_build_leaves_nothing_behind(tmp_path, monkeypatch):
    def fail_halfway(out_dir, recipe, seed):
        (out_dir / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "build_random_marian", fail_halfway)
    with pytest.raises(KeyboardInterrupt):
        models.build("tiny", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_opus_shape_matches_the_real_config_field_by_field(models_dir):
    directory, _ = models.build("opus-shape", models_dir)
    real = json.loads(REAL_CONFIG.read_text())
    built = {
        **json.loads((directory / "config.json").read_text()),
        **json.loads((directory / "generation_config.json").read_text()),
    }
    from transformers import GenerationConfig, MarianConfig

    defaults = MarianConfig().to_dict()  # fields the built file leaves implicit take the library default
    assert LEGACY_FIELDS.isdisjoint(defaults) and LEGACY_FIELDS.isdisjoint(GenerationConfig().to_dict())
    for field in sorted(set(real) - METADATA_FIELDS - LEGACY_FIELDS):
        assert built.get(field, defaults.get(field)) == real[field], field
    vocab = json.loads((directory / "vocab.json").read_text())
    assert len(vocab) == 65001 and vocab["<pad>"] == 65000 and vocab["</s>"] == 0 and vocab["<unk>"] == 1


def test_local_directory_missing_files_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(models.ModelSourceError, match="missing source.spm, target.spm, vocab.json, model.safetensors"):
        models.resolve({"name": "Helsinki-NLP/opus-mt-en-zh", "path": str(tmp_path), "seed": 0}, tmp_path)


def test_unreachable_hub_is_one_clear_error(tmp_path, models_dir):
    params = tmp_path / "real.yaml"
    params.write_text("model:\n  name: Helsinki-NLP/opus-mt-en-zh\n  source_prefix: '>>cmn_Hans<<'\n")
    env = cli_env(
        models_dir,
        HF_HOME=str(tmp_path / "hf"),
        HF_ENDPOINT="http://127.0.0.1:9",
        HF_HUB_ETAG_TIMEOUT="5",
        MTONNX_PROJECT_ROOT=str(REPO),
    )  # the params file lives outside the checkout
    done = run_cli("run", "--params", str(params), "--out", str(tmp_path / "out"), env=env, timeout=120)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("mtonnx: error:")]
    assert len(errors) == 1
    assert (
        "'Helsinki-NLP/opus-mt-en-zh' is not in the local Hugging Face cache and the hub could not be reached"
        in errors[0]
    )
    assert "set `model.path`" in errors[0]
    assert "Traceback" not in done.stderr


def test_a_missing_path_is_named_as_a_directory_never_fetched_from_the_hub(tmp_path):
    for name in (str(tmp_path / "no-such-model"), "./no-such-model", "~/no-such-model", "a/b/c"):
        with pytest.raises(models.ModelSourceError) as caught:
            models.resolve({"name": name, "path": None}, tmp_path)
        assert str(caught.value) == (
            f"model directory {name} does not exist (and it is not a hub name such as org/model)"
        ), caught.value


def test_a_regular_file_given_as_the_model_is_named_a_file(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"x")
    with pytest.raises(models.ModelSourceError, match=r"model.safetensors is a file, not a model directory"):
        models.resolve({"name": "mine", "path": str(weights)}, tmp_path)
