"""`deploy/`: the one directory a deployer takes (the recommended variant's files, its model card and the facts the
runtime reads), written by `publish` and stamped with the run's fingerprint by `stamp` once the run is complete."""

from mtonnx.deploy.writer import card, facts, invariance_line, publish, stamp, web_lines

__all__ = ["card", "facts", "invariance_line", "publish", "stamp", "web_lines"]
