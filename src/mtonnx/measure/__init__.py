"""Measurements: one timing primitive (interleaved repetitions), fresh-process memory probes, quality scores,
every variant measured alike, the peer engines and the peer benchmark, the tuning ablations."""
