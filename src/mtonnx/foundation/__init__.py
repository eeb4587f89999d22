"""The bottom layer: helpers every other package may use and that use nothing of this project.

- `files`: writes that never leave half a file (temp then rename, staged directories) and that respect what an
  output path already is (a device, a FIFO, a symlink).
- `envinfo`: the versions, machine and git commit a run's numbers came from.
- `side_by_side`: untimed work on threads, one per usable core.
- `jsonlines`: a child process spoken to in JSON lines (the Node runtime, the page in Chromium).
- `repetitions`: the fewest timed repetitions a speed statement is made from.
- `ports`: a free TCP port to listen on.

Standard library only at import time, so the torch-free runtime can build on it.
"""
