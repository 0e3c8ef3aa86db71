"""Remote side of tests/test_reduce.py (field case F20 and the smaller layers)."""

from __future__ import annotations

from dataclasses import asdict

from snippets.lib import devices
from snippets import smaller_layers

#: One logical CPU with a 1024 MiB cap, as the Smaller layers chapter uses.
CI = (1, "1024MiB")


def _ci() -> devices.DeviceSetup:
    return devices.configure(*CI)


def f20() -> dict:
    """F20: ids=[3,7,3], T=random[100,5]; one_hot(ids,100) @ T vs tf.gather(T, ids)."""
    import numpy as np

    _ci()
    product, lookup = smaller_layers.onehot_vs_gather([3, 7, 3], 100, 5)
    return {"shape": product.shape, "equal": bool(np.array_equal(product, lookup)),
            "rows_equal": bool(np.array_equal(lookup[0], lookup[2]))}


def step_bytes(vocab: int, dim: int, batch: int) -> list[dict]:
    _ci()
    return [asdict(row) for row in smaller_layers.onehot_vs_embedding_bytes(vocab, dim, batch)]


def training_diff(**kwargs) -> float:
    _ci()
    return smaller_layers.onehot_vs_embedding_training(**kwargs)


def low_rank(**kwargs) -> list[dict]:
    _ci()
    return [asdict(v) for v in smaller_layers.low_rank_experiment(**kwargs)]


def hashing(**kwargs) -> list[dict]:
    _ci()
    return [asdict(v) for v in smaller_layers.hashing_experiment(**kwargs)]


def bad_input(case: str) -> str:
    """The ValueError message for a bad id, rank or bucket count."""
    _ci()
    calls = {
        "id": lambda: smaller_layers.onehot_vs_gather([3, 100], 100, 5),
        "rank": lambda: smaller_layers.factorised_dense(8, 0),
        "buckets": lambda: smaller_layers.id_model(100, 0),
    }
    try:
        calls[case]()
    except ValueError as error:
        return str(error)
    return "no error"


def step_peaks(optimizer: str) -> dict:
    setup = _ci()
    return smaller_layers.step_peak_bytes(setup.devices[0], optimizer)
