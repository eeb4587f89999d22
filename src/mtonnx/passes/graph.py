"""Graph utilities every pass shares: who reads and writes each value, scalar constants, node provenance,
pruning and topological order. Pure functions over onnx protos."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper


def consumers_and_producers(
    graph: onnx.GraphProto,
) -> tuple[dict[str, list[onnx.NodeProto]], dict[str, onnx.NodeProto]]:
    """Which nodes read each value, and which node writes it."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    return consumers, {o: n for n in graph.node for o in n.output}


def scalar_constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The values of one-element initializers and Constant nodes (the attention scales), by output name."""
    constants = {
        i.name: numpy_helper.to_array(i)
        for i in graph.initializer
        if i.data_location != onnx.TensorProto.EXTERNAL and int(np.prod(i.dims)) == 1
    }
    constants.update(
        {
            n.output[0]: numpy_helper.to_array(n.attribute[0].t)
            for n in graph.node
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
        }
    )
    return constants


def constant_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Initializers plus the tensors of Constant nodes (exporters store weights either way)."""
    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    return tensors


def node_scope(node: onnx.NodeProto) -> str:
    """The module path a node came from: torch.export's name-scope metadata, or a TorchScript node name."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = [s for s in json.loads(prop.value.replace("'", '"')) if s]
            return max(scopes[:-1] or scopes, key=len) if scopes else ""
    parts = node.name.strip("/").split("/")
    parts = parts[1:] if parts and parts[0] == "model" else parts
    return ".".join(parts[:-1])


def weight_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """MatMul nodes whose second input is a constant weight (the ones quantization can make integer)."""
    constants = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in constants]


def replace_nodes(graph: onnx.GraphProto, removed: list[onnx.NodeProto], added: list[onnx.NodeProto]) -> None:
    """Remove `removed`, append `added` (call `toposort` after)."""
    for node in removed:
        graph.node.remove(node)
    graph.node.extend(added)


def prune(model: onnx.ModelProto) -> dict[str, int]:
    """Remove nodes whose outputs nobody reads and initializers no node uses (ORT warns about each)."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    nodes = 0
    while True:
        used = {i for n in graph.node for i in n.input} | outputs
        dead = [n for n in graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
        nodes += len(dead)
    used = {i for n in graph.node for i in n.input} | outputs
    unused = [i for i in graph.initializer if i.name not in used]
    for i in unused:
        graph.initializer.remove(i)
    return {"nodes": nodes, "initializers": len(unused)}


def toposort(graph: onnx.GraphProto) -> None:
    """Order the nodes so each comes after the producers of its inputs (ONNX requires it)."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    ordered, pending = [], list(graph.node)
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:
            raise ValueError("the graph has a cycle or a missing input")
        for node in ready:
            available.update(node.output)
        ordered += ready
        pending = [n for n in pending if n not in ready]
    del graph.node[:]
    graph.node.extend(ordered)
