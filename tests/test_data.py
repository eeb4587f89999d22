"""Eval and calibration data: a deterministic, disjoint split; sizes follow the params."""

from __future__ import annotations

import random
import re

from mtonnx import data

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_split_is_disjoint_complete_and_about_80_10_10():
    ids = {split: {p.id for p in data.hsk_split(split)} for split in data.SPLITS}
    assert ids["train"].isdisjoint(ids["dev"]) and ids["train"].isdisjoint(ids["test"])
    assert ids["dev"].isdisjoint(ids["test"])
    everything = {p.id for p in data.hsk_pairs()}
    assert len(everything) == 4354
    assert ids["train"] | ids["dev"] | ids["test"] == everything
    assert abs(len(ids["train"]) / 4354 - 0.8) < 0.03
    assert abs(len(ids["dev"]) / 4354 - 0.1) < 0.02
    assert abs(len(ids["test"]) / 4354 - 0.1) < 0.02


def test_split_depends_on_the_id_alone():
    pairs = list(data.hsk_pairs())
    before = {p.id: data.split_of(p.id) for p in pairs}
    random.Random(1).shuffle(pairs)
    assert {p.id: data.split_of(p.id) for p in pairs} == before
    assert data.split_of("hsk1-0001") == data.split_of("hsk1-0001")


def test_eval_set_sizes_follow_params_and_calibration_never_leaks():
    params = {"hsk_size": 7, "techdocs_size": 3, "eval_split": "test", "calibration_size": 50}
    pairs = data.eval_set(params)
    assert [p.source for p in pairs] == ["hsk"] * 7 + ["techdocs"] * 3
    assert all(data.split_of(p.id) == "test" for p in pairs if p.source == "hsk")
    calibration = data.calibration_set(params)
    assert len(calibration) == 50
    assert calibration == [p.en for p in data.hsk_split("train")[:50]]
    assert not {p.id for p in pairs} & {p.id for p in data.hsk_split("train")}
    assert data.summary(pairs)["by_source"] == {"hsk": 7, "techdocs": 3}


def test_techdocs_set_is_well_formed():
    pairs = data.techdocs_pairs()
    assert 30 <= len(pairs) <= 60
    assert len({p.id for p in pairs}) == len(pairs)
    for p in pairs:
        assert p.en and p.zh and "\t" not in p.en + p.zh
        assert CJK.search(p.zh), p.id
        assert not CJK.search(p.en), p.id
