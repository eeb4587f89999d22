"""`mtonnx migrate --source-prefix`, and the evaluation set's language against the model's: the target language read
from a source prefix, a forced first token or a target vocabulary; a set in another script refused in one line,
exit 2, before anything is built; nothing said when the model does not tell its language."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from conftest import REPO, cli_env, run_cli
from mtonnx.migrate import languages
from mtonnx.migrate.steps import Migration, MigrationRefused, check_languages

FRENCH = "Hello.\tBonjour.\nThank you very much.\tMerci beaucoup.\n"
CHINESE = "Hello.\t你好。\nThank you very much.\t非常感谢。\n"


def test_migrate_help_shows_the_source_prefix():
    done = run_cli("migrate", "--help")
    assert done.returncode == 0 and "--source-prefix TEXT" in done.stdout and "'>>cmn_Hans<<'" in done.stdout


def test_the_source_prefix_flag_replaces_the_params_one_and_the_hash():
    def flags(prefix: str | None) -> argparse.Namespace:
        params = str(REPO / "params" / "tiny-t5.yaml")
        return argparse.Namespace(
            model="tiny",
            out="o",
            params=params,
            eval_file=None,
            exporter="manual",
            only_fp32=False,
            source_prefix=prefix,
            overwrite=False,
        )

    from_params, flagged = Migration.from_args(flags(None)), Migration.from_args(flags(">>fra<<"))
    assert from_params.params["model"]["source_prefix"] == "translate English to Chinese:"
    assert flagged.params["model"]["source_prefix"] == ">>fra<<"
    assert flagged.params["_hash"] != from_params.params["_hash"]  # steps keyed by the params rerun with a new prefix


@pytest.mark.parametrize(
    ("texts", "script"),
    [
        (["你好。", "我很好，谢谢。"], "Han"),
        (["Bonjour.", "Merci."], "Latin"),
        (["Привет, мир."], "Cyrillic"),
        (["使用 pip 安装最新版本。"], "Han"),  # a few Latin letters in Chinese text
        (["3.9", ""], None),  # no letters: nothing to tell
    ],
)
def test_the_script_of_texts_is_the_one_most_of_their_letters_are_in(texts, script):
    assert languages.script_of(texts) == script


@pytest.mark.parametrize(
    ("code", "scripts"),
    [("cmn_Hans", {"Han"}), ("zho_Hans", {"Han"}), ("fra", {"Latin"}), ("German", {"Latin"}), ("jpn", {"Han", "Kana"})],
)
def test_a_language_code_or_name_gives_its_scripts(code, scripts):
    assert languages.scripts_of(code) == scripts
    assert languages.scripts_of("xyz") is None


def test_the_target_language_comes_from_the_prefix_the_forced_token_or_the_target_vocabulary(tiny_dir, family_model):
    vocabulary = languages.target_of(tiny_dir)
    assert vocabulary.scripts == {"Han"} and vocabulary.evidence == "its target vocabulary"
    prefixed = languages.target_of(tiny_dir, ">>fra<<")
    assert (prefixed.language, prefixed.scripts) == ("fra", {"Latin"})
    assert languages.target_of(tiny_dir, "translate English to German:") == vocabulary  # T5's, not Marian's
    for name, token in (("tiny-m2m100", "__zh__"), ("tiny-nllb", "zho_Hans")):
        forced = languages.target_of(family_model(name), ">>fra<<")  # M2M100 reads no prefix: its forced token tells
        assert forced.scripts == {"Han"} and forced.evidence == f"the token it forces first, {token}"
    t5 = family_model("tiny-t5")
    assert languages.target_of(t5) is None  # a shared vocabulary, no task prefix: nothing known, nothing said
    assert languages.target_of(t5, "translate English to German:").language == "German"


def test_a_mismatch_is_one_line_naming_both_sides_and_the_fix(tiny_dir):
    target = languages.target_of(tiny_dir, ">>fra<<")
    line = languages.mismatch(target, ["你好。"], "the default evaluation set")
    assert line == (
        "the default evaluation set has references in Han script, but the model translates into fra (Latin script, "
        "by its source prefix's target-language token '>>fra<<'): give --eval a TSV of source<TAB>reference pairs in "
        "the model's target language, or the source prefix of their language"
    )
    assert languages.mismatch(target, ["Bonjour."], "x") is None
    assert languages.mismatch(None, ["Bonjour."], "x") is None
    assert languages.mismatch(target, ["123"], "x") is None


def migration(tiny_dir: Path, prefix: str, eval_file: Path | None) -> Migration:
    from mtonnx import params

    m = Migration("tiny", Path("unused"), params.defaults(), eval_file)
    m.params["model"]["source_prefix"] = prefix
    m.results["load"] = {"dir": str(tiny_dir)}
    return m


def test_check_languages_passes_a_matching_set_and_refuses_another(tiny_dir, tmp_path):
    french, chinese = tmp_path / "fr.tsv", tmp_path / "zh.tsv"
    french.write_text(FRENCH, encoding="utf-8")
    chinese.write_text(CHINESE, encoding="utf-8")
    check_languages(migration(tiny_dir, "", chinese))
    check_languages(migration(tiny_dir, ">>fra<<", french))
    check_languages(migration(tiny_dir, "", None))  # the default set is Chinese, as tiny's target vocabulary
    with pytest.raises(MigrationRefused, match=rf"^--eval {french} has references in Latin script, but the model"):
        check_languages(migration(tiny_dir, "", french))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--source-prefix", ">>fra<<"], "the default evaluation set (English→Chinese; --eval replaces it) has "),
        (["--eval", "fr.tsv"], "has references in Latin script, but the model translates into Han script (by its"),
    ],
)
def test_migrate_refuses_a_set_in_another_language_before_building(extra, expected, tiny_dir, models_dir, tmp_path):
    (tmp_path / "fr.tsv").write_text(FRENCH, encoding="utf-8")
    out = tmp_path / "out"
    done = run_cli(
        "migrate", "--model", str(tiny_dir), "--out", str(out), *extra, cwd=tmp_path, env=cli_env(models_dir)
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.startswith("mtonnx: error: ") and expected in done.stderr
    assert not out.exists()
