"""Variants of an fp32 export, each a directory the runtime loads as is: the per-file transforms, the named
recipe registry, calibration for static int8, per-group sensitivity and the tuned variants."""
