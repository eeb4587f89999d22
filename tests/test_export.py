"""The hand export: four files that match PyTorch within 1e-4 at unseen shapes, token-exact greedy
decoding, a manifest equal to what ONNX Runtime sees, clear refusals, and no half-written output."""

from __future__ import annotations

import hashlib
import json

import pytest

from mtonnx import data
from mtonnx.check import parity, pitfalls
from mtonnx.export import manual as export
from mtonnx.runtime import layout
from mtonnx.sources.reference import translate_generate

FILES = list(layout.HAND_EXPORT)


@pytest.fixture(scope="module", params=["dynamo", "torchscript"])
def exported(request):
    out = request.getfixturevalue({"dynamo": "dynamo_export", "torchscript": "hand_export"}[request.param])
    return out, json.loads((out / layout.EXPORT_MANIFEST).read_text())  # the session's shared exports (conftest)


def test_every_file_matches_pytorch_within_1e4_at_unseen_shapes(exported, tiny):
    out, _ = exported
    result = parity.file_parity(tiny[0], out, tolerance=1e-4)
    assert sorted(result["files"]) == sorted(FILES)
    for file, entry in result["files"].items():
        assert len(entry["cases"]) == len(parity.CASES) >= 3
        for case, c in entry["cases"].items():
            assert c["max_abs_diff"] <= 1e-4, (file, case, c)
    assert result["pass"]


def test_parity_catches_a_decoder_exported_without_final_logits_bias(tiny_dir, tiny, tmp_path):
    broken = export.load_for_export(tiny_dir)
    broken.final_logits_bias.zero_()
    export.export_model(broken, tmp_path / "out", exporter="torchscript", files=[layout.DECODER])
    result = parity.file_parity(tiny[0], tmp_path / "out", tolerance=1e-4)
    assert not result["pass"]
    worst = result["files"][layout.DECODER]["cases"]["b1 src5 tgt1 past1"]
    assert worst["worst_output"] == "logits" and worst["max_abs_diff"] > 0.1


def test_greedy_over_the_files_is_token_exact_with_generate(exported, tiny):
    out, _ = exported
    model, tokenizer = tiny
    pairs = data.eval_set({"hsk_size": 8, "techdocs_size": 4, "eval_split": "test"})
    sources = [p.en for p in pairs]
    reference = translate_generate(
        model, tokenizer, sources, num_beams=1, max_new_tokens=20, batch_size=4, progress=False
    )
    result = parity.greedy_match(
        out,
        tokenizer,
        sources,
        reference["token_ids"],
        generation_config=model.generation_config,
        max_new_tokens=20,
        batch_size=5,
        layers=model.config.decoder_layers,
    )
    assert result["match"] == 1.0, result["mismatches"]


def test_manifest_equals_session_io_and_records_provenance(exported, tiny):
    out, manifest = exported
    assert sorted(manifest["files"]) == sorted(FILES)
    assert json.loads((out / layout.EXPORT_MANIFEST).read_text()) == manifest
    rows = parity.check_files(out)
    assert all(r["session I/O == manifest"] for r in rows)
    config = json.dumps(tiny[0].config.to_dict(), sort_keys=True, default=str)
    assert manifest["config_sha256"] == hashlib.sha256(config.encode()).hexdigest()
    assert manifest["opset"] == 18 and manifest["versions"]["torch"].startswith("2.13")
    past = {i["name"]: i for i in manifest["files"][layout.DECODER_WITH_PAST]["inputs"]}
    assert past["input_ids"] == {"name": "input_ids", "dtype": "int64", "shape": ["batch_size", 1]}
    assert past["past_key_values.1.decoder.key"]["shape"][2] == "past_decoder_sequence_length"
    assert past["past_key_values.1.encoder.value"]["shape"][2] == "encoder_sequence_length"
    outputs = [o["name"] for o in manifest["files"][layout.DECODER]["outputs"]]
    assert outputs[:5] == [
        "logits",
        "present.0.decoder.key",
        "present.0.decoder.value",
        "present.0.encoder.key",
        "present.0.encoder.value",
    ]


def test_training_mode_is_refused(tiny_dir, tmp_path):
    model = export.load_for_export(tiny_dir).train()
    with pytest.raises(export.ExportError, match=r"model is in training mode .*Call model.eval\(\) before exporting"):
        export.export_model(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("exporter", "opset", "message"),
    [
        ("onnxruntime", 18, "unknown exporter 'onnxruntime'; choose one of torchscript, dynamo"),
        ("dynamo", 14, "opset 14 is out of range for the dynamo exporter (18..23)"),
        ("torchscript", 21, "opset 21 is out of range for the torchscript exporter (14..20)"),
    ],
)
def test_bad_exporter_or_opset_is_a_clear_error(tiny_dir, tmp_path, exporter, opset, message):
    with pytest.raises(export.ExportError) as err:
        export.export_manual(tiny_dir, tmp_path / "out", exporter=exporter, opset=opset)
    assert str(err.value) == message
    assert list(tmp_path.iterdir()) == []


def test_interrupted_export_leaves_the_previous_result_and_no_partial_dir(tiny_dir, tmp_path, monkeypatch):
    out = tmp_path / "export_manual"
    out.mkdir()
    (out / "previous.txt").write_text("an earlier, complete export")
    real = export.export_subgraph
    calls = []

    def fail_on_third(*args, **kwargs):
        calls.append(args[1].file)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(export, "export_subgraph", fail_on_third)
    with pytest.raises(KeyboardInterrupt):
        export.export_manual(tiny_dir, out, exporter="torchscript")
    assert [p.name for p in tmp_path.iterdir()] == ["export_manual"]
    assert [p.name for p in out.iterdir()] == ["previous.txt"]


def test_static_axes_pitfall_fails_at_another_length(tiny_dir, tmp_path):
    result = pitfalls.static_axes(export.load_for_export(tiny_dir), tmp_path, exporter="torchscript")
    assert result["session_input_shapes"]["input_ids"] == [2, 7]
    assert result["error"] and "invalid dimensions for input: input_ids" in result["error"]


def test_an_export_is_reused_when_its_build_key_matches_and_rebuilt_when_the_opset_changes(tiny_dir, tmp_path):
    """Issue 37: builds keyed by content. An unchanged params file reuses the export; changing export.opset
    rebuilds it; a directory that merely exists is never reused."""
    from mtonnx.export.manual import ensure_exported
    from mtonnx.foundation import buildkey
    from mtonnx.params import load

    params = tmp_path / "p.yaml"
    lines: list[str] = []

    def export(opset: int) -> dict:
        params.write_text(f"model:\n  name: tiny\nexport:\n  exporter: torchscript\n  opset: {opset}\n")
        e = load(params)["export"]
        return ensure_exported(tiny_dir, tmp_path / "export", e["exporter"], e["opset"], log=lines.append)

    first = export(17)
    stamp = (tmp_path / "export" / layout.ENCODER).stat().st_mtime_ns
    again = export(17)
    assert again == first and lines[-1].startswith(f"reused {tmp_path / 'export'}")
    assert (tmp_path / "export" / layout.ENCODER).stat().st_mtime_ns == stamp  # not written again
    changed = export(18)
    assert changed["opset"] == 18 and lines[-1].startswith("rebuilding") and "differs" in lines[-1]
    assert buildkey.recorded(tmp_path / "export")["parts"]["opset"] == 18
    (tmp_path / "export" / buildkey.KEY_FILE).unlink()  # an export that exists but records no key
    export(18)
    assert "no build key" in lines[-1]


def test_layout_parity_runs_the_layouts_side_by_side_and_names_each_row_and_mismatch(hand_export, tiny):
    from mtonnx.runtime import Translator

    model, tokenizer = tiny
    sources = [p.en for p in data.eval_set({"hsk_size": 6, "techdocs_size": 2, "eval_split": "test"})]
    settings = dict(num_beams=2, max_new_tokens=12, batch_size=4)
    items = [{"en": s} for s in sources]
    for search, beams in (("greedy", 1), ("beam", 2)):
        ids = translate_generate(model, tokenizer, sources, **{**settings, "num_beams": beams}, progress=False)
        for item, row in zip(items, ids["token_ids"]):
            item[f"{search}_ids"] = row
    items[0]["beam_ids"] = [*items[0]["beam_ids"][:-1], items[0]["beam_ids"][-1] + 1]  # one sentence made different
    translators = {name: Translator(hand_export, decoder=name) for name in ("split", "no-cache", "auto")}  # 3 > 2 cores
    rows = parity.layout_parity(translators, model, tokenizer, {"items": items}, batch1_sentences=3, **settings)
    assert [(r["export"], r["search"], r["batch"]) for r in rows] == [
        (name, search, batch) for search in ("greedy", "beam") for name in translators for batch in (4, 1)
    ]
    for r in rows:
        wrong = r["search"] == "beam" and r["batch"] == 4  # the baseline sentence made different, in every layout
        assert r["token-identical"] == (1 - 1 / len(sources) if wrong else 1.0), r
        assert r["sentences"] == (len(sources) if r["batch"] == 4 else 3)


def test_exporter_trials_check_an_export_already_made_in_place_and_export_the_other_configs(
    hand_export, tiny_dir, tiny, monkeypatch
):
    from mtonnx.check import trials

    model, _ = tiny
    manifest = json.loads((hand_export / layout.EXPORT_MANIFEST).read_text())
    attention = trials.default_attention(tiny_dir)
    exported_by = []
    real_export = trials.export_subgraph

    def export_subgraph(model, spec, sample, path, exporter, opset):
        exported_by.append((exporter, spec.file))
        return real_export(model, spec, sample, path, exporter, opset)

    monkeypatch.setattr(trials, "export_subgraph", export_subgraph)
    configs = (("torchscript", attention), ("torchscript", "eager"))
    rows = trials.try_exporters(
        tiny_dir, model, configs, opset=manifest["opset"], exported={("torchscript", attention): hand_export}
    )
    files = list(manifest["files"])
    assert [(r["attention"], r["file"]) for r in rows] == [(a, f) for _, a in configs for f in files]
    assert exported_by == [("torchscript", f) for f in files]  # only the config without a directory
    reused = [r for r in rows if r["attention"] == attention]
    assert [r["seconds"] for r in reused] == [manifest["files"][f]["seconds"] for f in files]
    assert all(r["status"] == "ok" and r["max_abs_diff"] < 1e-4 for r in rows), rows
    assert all((hand_export / f).is_file() for f in files)  # checked where it lies, never removed

    exported_by.clear()  # a directory written at another opset is no export of this trial: exported anew
    other = manifest["opset"] - 1
    trials.try_exporters(tiny_dir, model, configs[:1], opset=other, exported={("torchscript", attention): hand_export})
    assert exported_by == [("torchscript", f) for f in files]
