"""The one contract between the exporters, the graph passes, the variants, the doctor and the translator: the
file names of each export layout, the cache tensors' names and order, and the metadata keys of the tuned step.

Every other module imports these names; none spells them itself. The cache names follow optimum's convention
(`past_key_values.{layer}.decoder.key`, `present.{layer}.encoder.value`), so one runtime loads either export.
"""

from __future__ import annotations

from mtonnx.runtime import families

ENCODER = "encoder_model.onnx"
DECODER = "decoder_model.onnx"  # the first step: computes every layer's cross-attention K/V
DECODER_WITH_PAST = "decoder_with_past_model.onnx"  # every later step, one new token
DECODER_MERGED = "decoder_model_merged.onnx"  # optimum: both decoders behind one If node
TRANSLATION_STEP = "translation_step.onnx"  # the no-cache baseline: encoder + whole prefix every step
CROSS_KV = "decoder_cross_kv.onnx"  # tuned variants: the cross-attention K/V once per sentence
TUNED_STEP = "decoder_with_past_tuned.onnx"  # tuned variants: keys read in place, cross K/V per sentence
INPLACE_STEP = "decoder_with_past_inplace.onnx"  # tuned variants: self-attention caches in runtime-owned buffers
WEIGHTS = "weights.bin"  # tuned variants: every large initializer once, memory-mapped by ONNX Runtime
SEARCH_HEAD = "search_head.onnx"  # tuned variants: log-softmax and top-k of a step's logits, for beam search
SEARCH_MODEL = "beam_search.onnx"  # the search inside the graph: ORT's BeamSearch over the split files' graphs
OUTPUT_ROWS = "output_rows.json"  # restricted variants: the vocab.json id of each logits column, in order
SHORTLIST = "shortlist.json"  # shortlisted variants: the target ids always kept, and those each source id brings
HEAD_COLUMNS = "lm_head_columns.npz"  # shortlisted variants: the lm_head weight and bias a batch's columns come from

DEPLOY = "deploy"  # in a run directory: the recommended variant, all the runtime needs, and its model card
MODEL_CARD = "model_card.md"
DEPLOY_FACTS = "deploy.json"  # in deploy/: what the card was written from, the run's source prefix among it

SUMS = "SHA256SUMS"  # in every export, variant and deploy/: each file's SHA-256 (runtime.integrity)
EXPORT_MANIFEST = "export_manifest.json"
VARIANT_MANIFEST = "variant_manifest.json"
TRANSLATIONS = "translations.json"  # in a run's variants/: every variant's translations of the eval set
TOKENIZER_FILES = families.TOKENIZER_FILES  # every family's tokenizer files (a directory holds its own family's)
# Copied next to the ONNX files (those the source has): an export directory is all the runtime needs (as in optimum).
MODEL_FILES = tuple(
    dict.fromkeys(
        (
            "config.json",
            "generation_config.json",
            *TOKENIZER_FILES,
            "tokenizer_config.json",
            "special_tokens_map.json",
            "added_tokens.json",
        )
    )
)

HAND_EXPORT = (ENCODER, DECODER, DECODER_WITH_PAST, TRANSLATION_STEP)
OPTIMUM_EXPORT = (ENCODER, DECODER, DECODER_WITH_PAST, DECODER_MERGED)
# The files a variant transforms (the split layout): every quantized or converted variant has them.
VARIANT_FILES = (ENCODER, DECODER, DECODER_WITH_PAST)

# Per decoder layer, in this order: self-attention key and value, cross-attention key and value.
SELF_KEY, SELF_VALUE, CROSS_KEY, CROSS_VALUE = KV = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")
SELF, CROSS = KV[:2], KV[2:]

# Metadata of the tuned step: how it wants its caches fed.
SELF_KEYS_KEY, SELF_KEYS_TIME_MAJOR = "mtonnx.self_attention_keys", "time-major"
SELF_CACHE_IN_PLACE = "in-place"  # the in-place step: keys and values in buffers bound as past and present
INPLACE_INPUTS = ("seqlens_k", "total_sequence_length")  # the in-place step's per-row and total filled lengths
CROSS_ATTENTION_KEY, CROSS_PER_SENTENCE = "mtonnx.cross_attention", "per-sentence"
# The search head (mtonnx.passes.search_head): per row, the top log-probabilities of a step's logits and their columns.
HEAD_TOP_K = "top_k"  # input beside "logits": how many per row
HEAD_OUTPUTS = ("top_log_probs", "top_indices")
# A shortlisted variant's decoders take the lm_head's weight and bias columns a batch may choose from as inputs.
HEAD_COLUMN_INPUTS = ("lm_head.weight_columns", "lm_head.bias_columns")


def past_names(layers: int, kinds: tuple[str, ...] = KV) -> list[str]:
    """decoder_with_past's cache inputs, layer by layer, each layer's `kinds` in KV order."""
    return [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in kinds]


def present_names(layers: int, kinds: tuple[str, ...] = KV) -> list[str]:
    """The decoders' cache outputs, layer by layer, each layer's `kinds` in KV order."""
    return [f"present.{i}.{kind}" for i in range(layers) for kind in kinds]


def by_kind(tensors: list, kinds: tuple[str, ...] = KV) -> dict[str, list]:
    """Tensors ordered as past_names/present_names(layers, kinds), grouped per kind: {kind: one per layer}."""
    return {kind: list(tensors[i :: len(kinds)]) for i, kind in enumerate(kinds)}


def layers_of(input_names: list[str]) -> int:
    """Decoder layers of a graph, counted from its self-attention key inputs."""
    return sum(1 for name in input_names if name.endswith(f".{SELF_KEY}"))
