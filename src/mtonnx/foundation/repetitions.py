"""The fewest timed repetitions a speed statement is made from.

One number for every judge of speed: a verdict or a recommendation in measure/, and `mtonnx compare` in report/,
which must not import measure/. Below it, one repetition that jumps to another level on a shared machine is a
large share of the evidence, so nothing is said.
"""

MIN_REPEATS = 5
