import sys, torch, torch.nn.functional as F
sys.path.insert(0, "bench")
from gpu_timing import median_ms
torch.manual_seed(1)
m, n, k = 16384, 4096, 1024
a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda"); b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
print(f"peer eager gelu(a@b+bias) median {median_ms(lambda: F.gelu(a @ b + bias), 50):.4f} ms")
print(f"peer cuBLASLt tanh epilogue median {median_ms(lambda: torch._addmm_activation(bias, a, b, use_gelu=True), 50):.4f} ms")
