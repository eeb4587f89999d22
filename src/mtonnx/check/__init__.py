"""Proof that an export computes what PyTorch computes (parity), `mtonnx doctor`, and the pitfalls from the
field reproduced on the current model."""
