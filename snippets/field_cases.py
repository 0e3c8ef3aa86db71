"""The Field cases page: the byte counts its entries quote, from the site's own arithmetic.

Measured figures (allocator peaks, placements, error messages) are asserted by
each case's test under ``tests/``; this module computes the sizes the entries
state, so that the page's numbers are code's numbers.

>>> figures()["F01"]
{'seed kernel per replica': 34359738368, 'over four replicas': 137438953472, 'CI-scale kernel': 1048576}
"""

from __future__ import annotations

from snippets.lib import hardware, units
from snippets.lib.seed import SEED_SHAPE


def figures() -> dict[str, dict[str, int | str]]:
    """Case ID -> {what the entry calls it: bytes (or a formatted capacity)}."""
    seed = units.tensor_bytes(SEED_SHAPE)
    d, f = SEED_SHAPE
    return {
        "F01": {"seed kernel per replica": seed, "over four replicas": 4 * seed,
                "CI-scale kernel": units.tensor_bytes([1024, 256])},
        "F09": {"tensor refused under a 256 MiB cap": units.tensor_bytes([d, 1024])},
        "F11": {"seed kernel in float16": units.tensor_bytes(SEED_SHAPE, "float16"),
                "a V100-32GB's allocator": units.human_bytes(hardware.V100_CAPACITY)},
        "F13": {"column shard of 4": units.tensor_bytes([d, f // 4])},
        "F17": {"a [1024, 1024] float32 tensor": units.tensor_bytes([1024, 1024])},
        "F18": {"a [16384, 1024] float32 variable": units.tensor_bytes([16384, 1024])},
        "F19": {"weights + gradients + RMSprop slot, seed, GiB": 3 * seed // units.GiB},
        "F20": {"rank-512 factors of the seed": units.tensor_bytes([d, 512]) + units.tensor_bytes([512, f])},
        "F21": {"Dense(1024) kernel on x[256, 4096], float32": units.tensor_bytes([4096, 1024]),
                "its output under mixed_float16": units.tensor_bytes([256, 1024], "float16")},
        "F22": {"the seed's gradient accumulator": seed},
        "F24": {"seed kernel + gradient + RMSprop slot, which remat leaves": 3 * seed},
        "F25": {"one Conv2D(64) output [16, 128, 128, 64] float32": units.tensor_bytes([16, 128, 128, 64])},
    }
