"""The search head: a two-node graph beside the tuned step that turns a step's logits into what beam search reads
of them, so the host never passes over the vocabulary.

Beam search needs, per row, the log-softmax and of it only the few largest entries: a sentence's best 2 x beams
continuations lie among its rows' best 2 x beams (a continuation's score is its log-probability plus its beam's
score). In numpy that is several passes over rows x vocabulary floats per step and dozens of calls; ORT's
LogSoftmax (MLAS: (logit - max) - log(sum(exp)), the order numpy follows here) and TopK do it in C++ in one more
session.run. `top_k` says how many per row: the runtime asks for 2 x beams plus the
tokens the processors ban at that step, which it drops itself. A file of its own, not outputs of the step graph:
ORT runs every node of a graph whether its output is fetched or not, and greedy decoding needs only the logits.
Hand-written because no library ships this piece (ORT's BeamSearch op replaces the whole loop: passes.search_graph).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from mtonnx.runtime import layout

OPSET = 18


def search_head_model() -> onnx.ModelProto:
    """logits [rows, vocab] and top_k [1] -> layout.HEAD_OUTPUTS: the top_k largest log-probabilities per row,
    largest first (ties: the lower column first, as ONNX's TopK specifies), and their columns."""
    values, indices = layout.HEAD_OUTPUTS
    graph = helper.make_graph(
        [
            helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=-1),
            helper.make_node("TopK", ["log_probs", layout.HEAD_TOP_K], [values, indices], axis=-1, sorted=1),
        ],
        "search_head",
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["rows", "vocab"]),
            helper.make_tensor_value_info(layout.HEAD_TOP_K, TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info(values, TensorProto.FLOAT, ["rows", "top_k"]),
            helper.make_tensor_value_info(indices, TensorProto.INT64, ["rows", "top_k"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model
