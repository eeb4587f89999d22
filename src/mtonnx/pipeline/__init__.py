"""One variant pipeline for the lab and `migrate`: the same stages, in the same order, with the same settings
(`stages`). What it builds comes from mtonnx.artefacts, which the benchmarks ask too, and what it reads from the
params comes as mtonnx.settings."""
