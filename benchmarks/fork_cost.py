"""Why whole-loop audits rerun the loop per branch instead of cloning the process at each draw.

"Branches together" by cloning (``os.fork`` at every draw that forks the enumeration, each child
taking one value) would run a shared prefix of the loop once. It pays only if a fork costs less
than rerunning a branch. This measures ``fork`` + ``_exit`` + ``waitpid`` in a process with what a
loop audit has imported (nothing, numpy, torch, torch + transformers), against the plain CPU cost
of one run of litgpt's ``generate`` on the audit's stand-ins (``bench_speed_loops``'s floor, one
branch), in the same run. ``python -m benchmarks.fork_cost``.

>>> callable(fork_ms)
True
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

_PROBE = """
import os, time
{imports}
n = {n}
t = time.perf_counter()
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print((time.perf_counter() - t) / n * 1e3)
"""


def fork_ms(imports: str, n: int = 50) -> float:
    """Wall milliseconds of one fork + exit + wait in a fresh interpreter that ran ``imports`` first."""
    out = subprocess.run([sys.executable, "-c", _PROBE.format(imports=imports, n=n)], capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _litgpt_branch_ms() -> float | None:
    """CPU milliseconds of one plain run of litgpt's generate on the stand-ins (None without litgpt)."""
    try:
        import exactspec as es
        from benchmarks.bench_speed_loops import _floor_ms, _litgpt
    except ImportError:
        return None
    try:
        fn = _litgpt(3, 3)
    except ImportError:
        return None
    p3, q3 = es.models.random_table(vocab=3, order=1, seed=1), es.models.random_table(vocab=3, order=1, seed=4)
    return _floor_ms(fn, dict(target=p3, draft=q3, kind="torch-lm", prompt=(0,)))[0]


def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}")
    for label, imports in (("bare python", ""), ("numpy", "import numpy"), ("torch", "import torch"),
                           ("torch + transformers", "import torch, transformers")):
        print(f"fork + exit + wait, {label:22s} {fork_ms(imports):8.2f} ms")
    branch = _litgpt_branch_ms()
    if branch is not None:
        print(f"one plain run of litgpt generate (gamma 3, vocab 3) on the stand-ins: {branch:.2f} ms CPU")


if __name__ == "__main__":
    main()
