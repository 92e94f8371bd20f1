"""The GPU scripts' timing of PyTorch peers: CUDA events around each call, after warm-up."""
import torch


def median_ms(f, n=20):
    for _ in range(3):
        f()
    s, e, ts = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(n):
        s.record()
        f()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)[n // 2]
