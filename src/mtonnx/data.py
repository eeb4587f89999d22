"""Evaluation and calibration data: (English, Chinese reference) pairs the project can ship.

Two sources, both offline:
- the HSK sentences packaged in `hsk-sentences-audio` (4,354 graded pairs, CC-BY-SA-4.0), split into
  train / dev / test by a hash of each sentence id, so the split never depends on order or on randomness;
- a small set of English technical-documentation sentences with Chinese references written for this
  project (`data/techdocs.tsv`), the use case the migration is for.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from typing import Any

HSK_CREDIT = (
    "HSK sentences: hsk-sentences-audio 1.0.0 (https://github.com/no7z/hsk-sentences-audio), "
    "CC-BY-SA-4.0. Shown here unchanged; redistributions must keep this attribution and license."
)
SPLITS = ("train", "dev", "test")
_SPLIT_PERCENT = {"train": range(0, 80), "dev": range(80, 90), "test": range(90, 100)}


@dataclass(frozen=True)
class Pair:
    """One sentence pair; `level` is the HSK level (0 for the tech-doc set)."""

    id: str
    en: str
    zh: str
    source: str
    level: int = 0


def split_of(sentence_id: str) -> str:
    """train (80 %), dev (10 %) or test (10 %), decided by a hash of the id alone."""
    bucket = _hash_rank(sentence_id) % 100
    return next(name for name, span in _SPLIT_PERCENT.items() if bucket in span)


def _hash_rank(sentence_id: str) -> int:
    return int.from_bytes(hashlib.sha256(sentence_id.encode()).digest()[:8], "big")


@lru_cache(maxsize=1)
def hsk_pairs() -> tuple[Pair, ...]:
    """All HSK pairs, in hash order (a fixed shuffle, so any prefix mixes levels and topics)."""
    from hsk_sentences_audio import load_sentences

    pairs = [
        Pair(s["id"], s["translation"]["en"].strip(), s["chinese"].strip(), "hsk", int(s["hsk_level"]))
        for s in load_sentences()
    ]
    return tuple(sorted(pairs, key=lambda p: _hash_rank(p.id)))


def hsk_split(split: str) -> list[Pair]:
    """The HSK pairs of one split, in hash order."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return [p for p in hsk_pairs() if split_of(p.id) == split]


@lru_cache(maxsize=1)
def techdocs_pairs() -> tuple[Pair, ...]:
    """The project's own English tech-doc sentences with Chinese references."""
    text = files("mtonnx").joinpath("data", "techdocs.tsv").read_text(encoding="utf-8")
    rows = csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    return tuple(Pair(r["id"], r["en"], r["zh"], "techdocs") for r in rows)


def eval_set(data_params: dict[str, Any]) -> list[Pair]:
    """The first `hsk_size` pairs of the eval split plus the first `techdocs_size` tech-doc pairs ("all": every one)."""
    hsk = hsk_split(data_params["eval_split"])[: _size(data_params["hsk_size"])]
    return hsk + list(techdocs_pairs()[: _size(data_params["techdocs_size"])])


def _size(value: int | str) -> int | None:
    return None if value == "all" else value


def calibration_set(data_params: dict[str, Any]) -> list[str]:
    """English calibration sentences, drawn from the train split only (never from eval data)."""
    return [p.en for p in hsk_split("train")[: data_params["calibration_size"]]]


def summary(pairs: list[Pair]) -> dict[str, Any]:
    """Counts per source and HSK level, for a notebook to show what it evaluates on."""
    by_source: dict[str, int] = {}
    by_level: dict[int, int] = {}
    for p in pairs:
        by_source[p.source] = by_source.get(p.source, 0) + 1
        if p.source == "hsk":
            by_level[p.level] = by_level.get(p.level, 0) + 1
    return {"pairs": len(pairs), "by_source": by_source, "hsk_by_level": dict(sorted(by_level.items()))}


def describe(data_params: dict[str, Any]) -> str:
    """The evaluation set in words, with its counts: what a gate measured on it can be trusted for."""
    pairs = eval_set(data_params)
    hsk = sum(p.source == "hsk" for p in pairs)
    return (
        f"the packaged evaluation set, {hsk} sentences of the HSK {data_params['eval_split']} split (in domain) and "
        f"{len(pairs) - hsk} tech-doc sentences (out of domain): a gate is only as good as this data"
    )
