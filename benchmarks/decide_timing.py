"""The reader's command for a 224 px ResNet50 the issue named, timed as a reader runs it (``make benchmark``:
``python -m benchmarks.model_planner --time-decide``, which also holds its plan against a run of its step)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The reader's command the issue named: a 224 px ResNet50, Adam, batch 256 on 4 V100-16GB.
DECIDE_RESNET = ["--model", "snippets.lib.zoo:resnet50", "--model-kwargs", '{"size": 224}',
                 "--loss", "sparse_categorical_crossentropy", "--optimizer", "adam", "--strategy", "mirrored",
                 "--devices", "4", "--batch", "256", "--card", "V100-PCIE-16GB", "--json"]


#: Times :func:`time_decide` runs the reader's command: timed once, it read 62.7 s; by hand on later days on the same
#: 2-core host, with no change to its runs, 74-82 s.
DECIDE_TIMES = 3


def time_decide(times: int = DECIDE_TIMES) -> dict:
    """Wall time of ``python -m snippets.decide`` on :data:`DECIDE_RESNET`, as a reader runs it, ``times`` times one
    after another: ``{"argv", "seconds"`` (the median), ``"seconds_each"`` (in order), ``"plan"}`` (the median run's
    ``--json``; racing threads move a plan a little from one run to the next)."""
    timed = []
    for _ in range(times):
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "snippets.decide", *DECIDE_RESNET], capture_output=True,
                              text=True, cwd=ROOT, check=True)
        timed.append((round(time.perf_counter() - began, 1), json.loads(done.stdout)))
    seconds, plan = sorted(timed, key=lambda one: one[0])[len(timed) // 2]
    return {"argv": DECIDE_RESNET, "seconds": seconds, "seconds_each": [one[0] for one in timed], "plan": plan}
