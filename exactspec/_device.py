"""Which torch device to compute on, and with how many threads: below the tensor law engine, the statistical
audit and the sampler layer.

``exactspec.tensor`` (whose row-wise audit falls back to the statistical audit) and
``exactspec.statistical`` (whose batched sampling puts tensors on a device) both need
:func:`best_device`; it lives here so that neither imports the other for it. The row-wise
audit and the sampler and loop audits run torch on one thread (:func:`one_torch_thread`), without
the tensor layer importing the sampler layer above it. Imports torch only when called.

>>> best_device() in ("cpu", "cuda")
True
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

__all__ = ["best_device", "one_torch_thread"]


def best_device() -> str:
    """``"cuda"`` when a GPU is visible to torch, else ``"cpu"``.

    >>> best_device() in ("cpu", "cuda")
    True
    """
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch's intra-op threads spin on the tiny tensors an audit makes: one thread for the audit, restored after.

    (Measured on transformers' sampler at vocab 3, gamma 3, 3 tokens on 2 busy cores: 103 s with torch's
    default threads, 0.27 s with one.) Without torch imported it does nothing (and imports nothing).

    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with one_torch_thread():
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
