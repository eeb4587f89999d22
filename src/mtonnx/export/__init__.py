"""Exports of the PyTorch model: the hand export's subgraph wrappers and its one sample-input generator, the
generic export step (`torch.onnx.export`), optimum's export, and both exporters tried on every subgraph."""
