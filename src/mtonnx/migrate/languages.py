"""Which language a model translates into, and which script an evaluation set's references are written in, so that
`mtonnx migrate` never gates a model on references in another language: BLEU against them measures nothing, and the
quality gate would pass or fail on noise.

The policy: a migration whose references are written in a script the model's target language does not use is
refused in one line (exit 2) before anything is built, naming both and the fix. The target language is known from,
first to last:
- the source prefix, as the model's family reads it: a Marian target-language token (`>>cmn_Hans<<`, `>>fra<<`), a
  T5 task prefix (`translate English to German:`);
- the token generation forces first (`forced_bos_token_id`: M2M100's `__zh__`, NLLB's `zho_Hans`);
- a target vocabulary of its own (Marian's target.spm) written almost entirely in one script.
When none of them tells, or the language is not one listed in LANGUAGES, nothing is said: the check never guesses.
Only scripts are compared, so two languages written in one script (French and Spanish) are not told apart.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# The scripts of each language, by ISO 639-1 and 639-3 code and English name (as T5's task prefix spells it).
LANGUAGES: dict[frozenset[str], tuple[str, ...]] = {
    frozenset({"Han"}): ("zh", "zho", "chi", "cmn", "yue", "wuu", "gan", "hak", "nan", "lzh", "chinese", "cantonese"),
    frozenset({"Han", "Kana"}): ("ja", "jpn", "japanese"),
    frozenset({"Hangul"}): ("ko", "kor", "korean"),
    frozenset({"Cyrillic"}): ("ru", "rus", "russian", "uk", "ukr", "ukrainian", "bg", "bul", "bulgarian", "be", "bel"),
    frozenset({"Arabic"}): ("ar", "ara", "arabic", "fa", "fas", "per", "persian", "ur", "urd", "urdu"),
    frozenset({"Greek"}): ("el", "ell", "gre", "greek"),
    frozenset({"Hebrew"}): ("he", "heb", "hebrew"),
    frozenset({"Devanagari"}): ("hi", "hin", "hindi", "mr", "mar", "marathi", "ne", "nep", "nepali"),
    frozenset({"Thai"}): ("th", "tha", "thai"),
    frozenset({"Latin"}): (
        *("en", "eng", "english", "fr", "fra", "fre", "french", "de", "deu", "ger", "german", "es", "spa", "spanish"),
        *("it", "ita", "italian", "pt", "por", "portuguese", "nl", "nld", "dut", "dutch", "ro", "ron", "rum"),
        *("romanian", "pl", "pol", "polish", "cs", "ces", "cze", "czech", "sv", "swe", "swedish", "da", "dan"),
        *("danish", "fi", "fin", "finnish", "no", "nor", "nb", "nob", "norwegian", "hu", "hun", "hungarian", "tr"),
        *("tur", "turkish", "id", "ind", "indonesian", "ms", "msa", "may", "malay", "vi", "vie", "vietnamese"),
        *("ca", "cat", "catalan", "et", "est", "estonian", "lv", "lav", "latvian", "lt", "lit", "lithuanian"),
        *("sk", "slk", "slo", "slovak", "sl", "slv", "slovenian", "hr", "hrv", "croatian", "af", "afr", "afrikaans"),
        *("sw", "swa", "swahili", "tl", "tgl", "tagalog", "eo", "epo", "esperanto", "la", "lat", "latin"),
    ),
}
SCRIPTS_OF = {language: scripts for scripts, languages in LANGUAGES.items() for language in languages}
# ISO 15924 script codes as NLLB's (zho_Hans) and Marian's (cmn_Hans) language codes end, and what they say.
SUFFIXES = {
    "Hans": {"Han"},
    "Hant": {"Han"},
    "Hani": {"Han"},
    "Jpan": {"Han", "Kana"},
    "Kore": {"Hangul", "Han"},
    "Hang": {"Hangul"},
    "Latn": {"Latin"},
    "Cyrl": {"Cyrillic"},
    "Arab": {"Arabic"},
    "Grek": {"Greek"},
    "Hebr": {"Hebrew"},
    "Deva": {"Devanagari"},
    "Thai": {"Thai"},
}
# A letter's script is the first word of its Unicode name, but for these.
RENAMED = {"CJK": "Han", "HIRAGANA": "Kana", "KATAKANA": "Kana"}
VOCABULARY_SHARE = 0.9  # a target vocabulary tells its script only when this share of its letters is in one script
# What names the target language in a family's source prefix (model_type -> pattern, what it is called).
PREFIXES = {
    "marian": (re.compile(r">>(\w+)<<"), "target-language token"),
    "t5": (re.compile(r"translate .+ to (\w+)\s*:", re.IGNORECASE), "task prefix"),
}


@dataclass(frozen=True)
class Target:
    """The language a model translates into (None when only its script is known), its scripts, and how that is
    known (for the message)."""

    language: str | None
    scripts: frozenset[str]
    evidence: str

    def __str__(self) -> str:
        scripts = f"{' or '.join(sorted(self.scripts))} script"
        return (
            f"{self.language} ({scripts}, by {self.evidence})" if self.language else f"{scripts} (by {self.evidence})"
        )


def script_of(texts: Iterable[str], share: float = 0.5) -> str | None:
    """The script more than `share` of the texts' letters are written in (None without letters, or with none that
    dominant)."""
    counts = Counter(_script(ch) for text in texts for ch in text if ch.isalpha())
    counts.pop(None, None)
    if not counts:
        return None
    script, letters = counts.most_common(1)[0]
    return script if letters > share * sum(counts.values()) else None


def _script(ch: str) -> str | None:
    name = unicodedata.name(ch, "").split(" ")[0]
    return RENAMED.get(name, name.title()) if name else None


def scripts_of(code: str) -> frozenset[str] | None:
    """The scripts a language code or name is written in (`zho_Hans`: its script suffix), None when not known."""
    base, _, suffix = code.partition("_")
    if suffix in SUFFIXES:
        return frozenset(SUFFIXES[suffix])
    return SCRIPTS_OF.get(base.lower())


def target_of(model_dir: str | Path, source_prefix: str = "") -> Target | None:
    """What `model_dir` translates into, by the first evidence the module's docstring lists that names a known
    language; None when none does (a tokenizer the runtime cannot read tells nothing)."""
    from mtonnx.runtime import families, load_tokenizer

    model_dir = Path(model_dir)
    try:
        family = families.of_dir(model_dir)
    except families.UnknownFamily:
        return None
    if family.model_type in PREFIXES:
        pattern, kind = PREFIXES[family.model_type]
        found = pattern.search(source_prefix)
        if found and scripts_of(found.group(1)):
            return Target(found.group(1), scripts_of(found.group(1)), f"its source prefix's {kind} {found.group(0)!r}")
    forced = families.read_json(model_dir / "generation_config.json").get(
        "forced_bos_token_id", families.read_json(model_dir / "config.json").get("forced_bos_token_id")
    )
    try:
        tokenizer = load_tokenizer(model_dir)
    except ValueError:
        return None
    token = tokenizer.decoder.get(forced, "") if forced is not None else ""
    if scripts_of(token.strip("_")):
        return Target(token.strip("_"), scripts_of(token.strip("_")), f"the token it forces first, {token}")
    if tokenizer.target is not tokenizer.source:
        pieces = (tokenizer.target.id_to_piece(i) for i in range(tokenizer.target.get_piece_size()))
        script = script_of(pieces, VOCABULARY_SHARE)
        if script:
            return Target(None, frozenset({script}), "its target vocabulary")
    return None


def mismatch(target: Target | None, references: list[str], where: str) -> str | None:
    """One line saying that `where`'s references are in a script the model's target language is not written in,
    and the fix; None when they agree or either side is unknown."""
    script = script_of(references)
    if target is None or script is None or script in target.scripts:
        return None
    return (
        f"{where} has references in {script} script, but the model translates into {target}: give --eval a TSV of "
        "source<TAB>reference pairs in the model's target language"
        + (", or the source prefix of their language" if "source prefix" in target.evidence else "")
    )
