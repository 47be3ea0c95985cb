"""Which torch device to compute on: below both the tensor law engine and the statistical audit.

``exactspec.tensor`` (whose row-wise audit falls back to the statistical audit) and
``exactspec.statistical`` (whose batched sampling puts tensors on a device) both need
:func:`best_device`; it lives here so that neither imports the other for it. Imports torch
only when called.

>>> best_device() in ("cpu", "cuda")
True
"""

from __future__ import annotations

__all__ = ["best_device"]


def best_device() -> str:
    """``"cuda"`` when a GPU is visible to torch, else ``"cpu"``.

    >>> best_device() in ("cpu", "cuda")
    True
    """
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"
