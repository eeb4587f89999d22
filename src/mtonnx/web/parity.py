"""The web export's gate: the JavaScript runtime in Node against the Python runtime on the same ONNX files.

Both tokenize the evaluation sentences and translate them greedily and with the generation config's beams; every
id list must be equal. Node's tokens are compared against the Python runtime on the same merged decoder, so any
difference is the JavaScript side's (its tokenizer, its decoding loop, onnxruntime-node's kernels), never the
export's. When Node cannot run here the gate is not measured and says why: a web export that was not checked is
still written, marked unchecked, since a machine without Node is no evidence against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtonnx.runtime.translator import Translator
from mtonnx.web.node import NodeRuntime, unavailable

EDGE_CASES = [  # inputs on which a tokenizer's normalization or lattice can go wrong
    "“Curly quotes,” an em dash — and an ellipsis…",  # unicode punctuation
    "Ｆｕｌｌ－ｗｉｄｔｈ：ＡＢＣ　１２３！",  # full-width forms and the ideographic space
    "ﬁne ﬀ ½ ① ㎏ Ⅻ ℌ",  # NFKC folds each of these
    "e\u0301 vs é, and a\u00a0no-break\u2009thin space",  # a combining accent; odd spaces
    "tabs\tand   runs of   spaces ",
    "Hello 世 world",  # a character source.spm lacks, which the target side has
    "Hello 世界 world",  # a run of them: one <unk> piece, looked up whole
    "€100 ‘x’",
    "a </s> b <unk> c",  # special tokens typed in the text are kept whole
    ">>cmn_Hans<< A target-language prefix",
    "",
]


def node_parity(
    web_dir: str | Path,
    onnx_dir: str | Path,
    sources: list[str],
    beams: int,
    max_new_tokens: int,
    source_prefix: str = "",
) -> dict[str, Any]:
    """{gate, sentences, tokenizer, greedy, beam<beams>: how many of the sentences agree} or {gate: not measured,
    reason}; gate `pass` only when every id list is equal. Both translate with the run's `max_new_tokens`: a
    generation config's max_length (512 for opus-mt) would let an untrained model decode hundreds of steps."""
    problem = unavailable()
    if problem:
        return {"gate": "not measured", "reason": problem}
    python = Translator(onnx_dir, decoder="merged")
    encoded = [python.tokenizer.encode(f"{source_prefix} {text}".strip()) for text in sources]
    result: dict[str, Any] = {"sentences": len(sources)}
    with NodeRuntime(web_dir) as node:
        result["tokenizer"] = sum(a == b for a, b in zip(node.encode(sources, source_prefix), encoded))
        for name, n in (("greedy", 1), (f"beam{beams}", beams)):
            expected = python.generate_sorted(encoded, 8, num_beams=n, max_new_tokens=max_new_tokens)
            ids, _ = node.generate(sources, num_beams=n, max_new_tokens=max_new_tokens)
            result[name] = sum(a == b for a, b in zip(ids, expected))
    counts = [v for k, v in result.items() if k != "sentences"]
    result["gate"] = "pass" if all(c == len(sources) for c in counts) else "fail"
    return result
