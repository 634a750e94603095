"""Named random streams derived from the scenario seed.

Every random draw in mecsim comes from a stream keyed by
``(seed, purpose, *keys)``, e.g. ``("fading", "up", client, round)``. The key
is hashed, so adding a client or a round never shifts another stream, and
no code touches global RNG state.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, *key: object) -> int:
    """A 63-bit seed for the stream ``(seed, *key)``; stable across runs and machines."""
    text = "/".join([str(int(seed))] + [str(k) for k in key])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def numpy_rng(seed: int, *key: object) -> np.random.Generator:
    """A NumPy generator for the stream ``(seed, *key)``."""
    return np.random.default_rng(derive_seed(seed, *key))


def torch_generator(seed: int, *key: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator for the stream ``(seed, *key)`` on ``device``."""
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(seed, *key))
    return generator
