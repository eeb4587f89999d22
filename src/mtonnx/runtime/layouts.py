"""The decoder layouts as one declarative registry: each entry names its files, how their sessions become a decoder,
and what it supports, in the way optimum's per-architecture configs drive one generic path.

The Translator builds its decoder from the entry, doctor loads its files, the command lines offer the public ones:
nothing else branches on a layout's name. The last file of an entry is the one whose logits the decoder reads.

- `inplace`: the tuned variants' default: caches bound as past and present (runtime.inplace), the fastest;
- `split`: encoder, first step, step with past: every export and variant has it, and fp32 is token-exact with
  PyTorch on it;
- `merged`: optimum's merged decoder, both steps behind one If node;
- `tuned`, `lean`: the steps on the way to `inplace` (the tuning ablation); kept for that lesson, not offered to
  users;
- `no-cache`: the whole prefix re-run every step, the quadratic baseline tutorials stop at (a lesson of its
  own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mtonnx.runtime import layout as names

Sessions = Mapping[str, Any]  # file name -> ONNX Runtime session (or a stand-in with its `run`)
Decoder = Any  # runtime.decoders.CachedDecoder or NoCacheDecoder: imported when built, so the registry stays light


@dataclass(frozen=True)
class Layout:
    """One way to lay the decoder out in files, and what the runtime can do with it."""

    name: str
    files: tuple[str, ...]
    decoder: Callable[[Sessions], Decoder]
    about: str
    io_binding: bool = False  # the caches are bound as past and present: no step copies them
    search_head: bool = False  # beam search ranks from the variant's search head when it has one
    shortlist: bool = False  # decodes a shortlisted variant (the lm_head columns are fed)
    public: bool = True  # offered by --decoder; the others are kept for the tuning lesson
    beam: bool = True  # beam search (every layout: the search is the runtime's, outside the graph)
    retirement: bool = True  # done sentences leave the batch (decoding.RETIRE_SHARE)


def _lean(step: str, in_place: bool = False) -> Callable[[Sessions], Decoder]:
    """A lean layout's decoder: the encoder, the cross K/V file and `step` for every step, the search head if any."""

    def build(s: Sessions) -> Decoder:
        from mtonnx.runtime.decoders import CachedDecoder
        from mtonnx.runtime.inplace import InPlaceDecoder

        decoder = InPlaceDecoder if in_place else CachedDecoder
        return decoder(s[names.ENCODER], None, s[step], cross_kv=s[names.CROSS_KV], head=s.get(names.SEARCH_HEAD))

    return build


def _split(s: Sessions) -> Decoder:
    from mtonnx.runtime.decoders import CachedDecoder

    return CachedDecoder(s[names.ENCODER], s[names.DECODER], s[names.DECODER_WITH_PAST])


def _merged(s: Sessions) -> Decoder:
    from mtonnx.runtime.decoders import CachedDecoder

    return CachedDecoder(s[names.ENCODER], None, s[names.DECODER_MERGED])


def _no_cache(s: Sessions) -> Decoder:
    from mtonnx.runtime.decoders import NoCacheDecoder

    return NoCacheDecoder(s[names.TRANSLATION_STEP])


REGISTRY: tuple[Layout, ...] = (
    Layout(
        "inplace",
        (names.ENCODER, names.CROSS_KV, names.INPLACE_STEP),
        _lean(names.INPLACE_STEP, in_place=True),
        "tuned variants: self-attention caches in buffers bound as past and present, fused attention",
        io_binding=True,
        search_head=True,
        shortlist=True,
    ),
    Layout(
        "tuned",
        (names.ENCODER, names.CROSS_KV, names.TUNED_STEP),
        _lean(names.TUNED_STEP),
        "tuned variants: keys read in place from a time-major buffer, cross K/V once per sentence",
        search_head=True,
        shortlist=True,
        public=False,
    ),
    Layout(
        "lean",
        (names.ENCODER, names.CROSS_KV, names.DECODER_WITH_PAST),
        _lean(names.DECODER_WITH_PAST),
        "tuned variants: every step on decoder_with_past from an empty past; decoder_model never loaded",
        search_head=True,
        shortlist=True,
        public=False,
    ),
    Layout(
        "split",
        names.VARIANT_FILES,
        _split,
        "every export and variant: encoder, first step, step with past",
        shortlist=True,
    ),
    Layout(
        "merged",
        (names.ENCODER, names.DECODER_MERGED),
        _merged,
        "optimum's merged decoder: both steps behind one If node",
    ),
    Layout(
        "no-cache",
        (names.TRANSLATION_STEP,),
        _no_cache,
        "the hand export's translation step: encoder and whole prefix every step (the baseline)",
        public=False,
    ),
)
BY_NAME = {entry.name: entry for entry in REGISTRY}
AUTO_ORDER = ("inplace", "tuned", "lean", "split", "merged")  # what `decoder="auto"` picks: the first present
PUBLIC = tuple(entry.name for entry in REGISTRY if entry.public)  # the --decoder choices besides "auto"
