"""mlp_train's peers: y = gelu(x·W1 + b1)·W2 (exact GELU) and, given dL/dy, dx, dW1, db1 and dW2 —
PyTorch eager and torch.compile (forward and backward through autograd, which torch.compile
compiles both of), at the example's shape unless told otherwise. Prints one line per peer."""
import argparse
import sys

import torch

sys.path.insert(0, "bench")
from gpu_timing import median_ms  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=16384)
    a = p.parse_args()
    torch.manual_seed(0)
    dt, dev = torch.bfloat16, "cuda"
    x = torch.randn(a.tokens, a.width, dtype=dt, device=dev, requires_grad=True)
    w1 = (torch.randn(a.width, a.hidden, dtype=dt, device=dev) / a.width**0.5).requires_grad_()
    b1 = torch.randn(a.hidden, dtype=dt, device=dev, requires_grad=True)
    w2 = (torch.randn(a.hidden, a.width, dtype=dt, device=dev) / a.hidden**0.5).requires_grad_()
    dy = torch.randn(a.tokens, a.width, dtype=dt, device=dev)

    def forward(x, w1, b1, w2):
        return torch.nn.functional.gelu(x @ w1 + b1) @ w2

    compiled = torch.compile(forward)
    flops = 3 * 2 * 2 * a.tokens * a.width * a.hidden  # two GEMMs forward, four backward
    for name, f in (("eager", forward), ("torch.compile", compiled)):
        def step():
            for t in (x, w1, b1, w2):
                t.grad = None
            f(x, w1, b1, w2).backward(dy)
        t = median_ms(step)
        print(f"mlp_train peer {name} {a.tokens}x{a.width}x{a.hidden} bf16: fwd+bwd {t:.3f} ms, "
              f"{flops / t / 1e9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
