import os

# Triton reads TRITON_INTERPRET when a @triton.jit function is defined, its own helpers (tl.zeros) included: the
# published kernels audited under Triton's CPU interpreter (tests/test_published_vllm.py) need it set before
# anything imports triton, whichever test module imports it first. Nothing else in the suite uses Triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

pytest_plugins = ["pytester"]
