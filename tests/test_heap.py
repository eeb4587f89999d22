"""runtime.heap: decoding's allocation pattern stops faulting the heap in again once it is held, and release()
gives the memory back. Each case runs in a fresh interpreter: glibc's settings are per process."""

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="runtime.heap acts on glibc only"
)

# A decoding step's pattern: several outputs of a few MB allocated, all freed, again (minor faults counted).
CHURN = """
import json, resource, sys
import numpy as np
from mtonnx.runtime import heap
if sys.argv[1] == "hold":
    assert heap.hold()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
start = faults()
for _ in range(20):
    step = [np.ones(1_250_000, np.float32) for _ in range(8)]  # 8 x 5 MB
    del step
churn = faults() - start
held = [np.ones(1_250_000, np.float32) for _ in range(40)]
pinned = np.ones(1000)  # a live block above the freed ones: only malloc_trim returns what lies below it
del held
before = rss_mb()
heap.release()
print(json.dumps({"faults": churn, "rss_before": before, "rss_after": rss_mb()}))
"""


def _churn(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_held_heap_is_not_faulted_in_again_every_step():
    default, held = _churn("default"), _churn("hold")
    pages = 8 * 5_000_000 // 4096  # one step's pages
    assert default["faults"] > 5 * pages  # glibc's defaults: measured ~8 of the 20 steps' pages faulted in again
    assert held["faults"] < 2 * pages  # held: the first step's at most


def test_release_returns_the_free_heap():
    held = _churn("hold")
    assert held["rss_before"] - held["rss_after"] > 150  # of the 200 MB freed under a live block


def test_sessions_allocate_from_the_held_heap_and_generate_hands_it_back(hand_export, monkeypatch):
    from mtonnx.runtime import SessionSettings, Translator, heap

    assert SessionSettings().options().enable_cpu_mem_arena is False  # ORT's arena would keep the peak forever
    assert SessionSettings(arena=True).options().enable_cpu_mem_arena is True
    released = []
    monkeypatch.setattr(heap, "release", lambda: released.append(1))
    translator = Translator(hand_export)
    translator.translate(["Hello.", "How are you?", "Tea is hot."], batch_size=2, num_beams=2, max_new_tokens=4)
    assert len(released) == 1  # once per call, not between its two batches (they reuse the heap)
    ids, mask = translator.tokenizer.batch(["Hello."])
    translator.generate(ids, mask, max_new_tokens=4)
    assert len(released) == 2
    assert heap.hold()
