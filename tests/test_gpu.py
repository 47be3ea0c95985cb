"""GPU checks of the tensor law engine: they run only where torch sees CUDA (CI has no GPU)."""

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU module runs only where one is present", allow_module_level=True)

from exactspec.tensor import TENSOR_CHAIN_RULES, chain_step_laws, tree_step_laws  # noqa: E402


def test_cuda_laws_equal_cpu_laws_at_large_vocab():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(9, 128_000, generator=gen, dtype=torch.float64) * 3, -1)
    q = torch.softmax(torch.log(p[:8]) + torch.randn(8, 128_000, generator=gen, dtype=torch.float64), -1)
    for name in TENSOR_CHAIN_RULES:
        cpu = chain_step_laws(name, p, q, device="cpu")
        gpu = chain_step_laws(name, p, q, device="cuda")
        assert gpu.position_marginals.device.type == "cuda"
        assert torch.allclose(cpu.position_marginals, gpu.position_marginals.cpu(), atol=1e-12, rtol=0)
    for name in ("mss", "naive_tree_sampling"):
        cpu = tree_step_laws(name, p[:3], q[:2], width=3, device="cpu")
        gpu = tree_step_laws(name, p[:3], q[:2], width=3, device="cuda")
        assert torch.allclose(cpu.position_marginals, gpu.position_marginals.cpu(), atol=1e-12, rtol=0)
