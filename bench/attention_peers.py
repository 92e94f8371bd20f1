"""PyTorch's attention on the attention examples' and family's shapes, for scripts/gpu_attention.sh:
SDPA's cuDNN and flash backends where SDPA can express the graph, FlexAttention (flex_attention
under torch.compile, PyTorch's compiler-generated attention) for the score variants and the
headline pair. Each line:

    peer NAME BACKEND: MS ms

(medians of CUDA events; "peer NAME BACKEND: unavailable (why)" where a backend refuses).

    python3 bench/attention_peers.py NAME...
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, "bench")
from gpu_timing import median_ms  # noqa: E402

# name: (batch, query heads, K/V heads, n, d, score function). Mirrors dsl_examples/attention.cpp.
SHAPES = {
    "attention": (8, 32, 32, 4096, 128, "plain"),
    "attention_causal": (8, 32, 32, 4096, 128, "causal"),
    "attention_gqa": (8, 32, 8, 4096, 128, "plain"),
    "attention_gqa_causal": (8, 32, 8, 4096, 128, "causal"),
    "attention_d64": (8, 32, 32, 4096, 64, "plain"),
    "attention_d64_causal": (8, 32, 32, 4096, 64, "causal"),
    "attention_d256": (8, 32, 32, 4096, 256, "plain"),
    "attention_d256_causal": (8, 32, 32, 4096, 256, "causal"),
    "attention_n4097": (8, 32, 32, 4097, 128, "plain"),
    "attention_n4097_causal": (8, 32, 32, 4097, 128, "causal"),
    "attention_softcap": (8, 32, 32, 4096, 128, "softcap"),
    "attention_alibi": (8, 32, 32, 4096, 128, "alibi"),
    "attention_window": (8, 32, 32, 4096, 128, "window"),
}
WINDOW = 1024


def flex_fn(kind, h, n, slopes):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    score_mod, mask_mod = None, None
    if kind == "softcap":
        def score_mod(score, b, hh, q, kv):
            return torch.tanh(score / 50) * 50
    if kind == "alibi":
        def score_mod(score, b, hh, q, kv):
            return score + slopes[hh] * (kv - q)
    if kind in ("causal", "alibi"):
        def mask_mod(b, hh, q, kv):
            return q >= kv
    if kind == "window":
        def mask_mod(b, hh, q, kv):
            return (q >= kv) & (q - kv < WINDOW)
    block_mask = create_block_mask(mask_mod, None, None, n, n) if mask_mod else None
    compiled = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v, gqa: compiled(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)


def main(names):
    for name in names:
        if name not in SHAPES:
            print(f"peer {name}: no PyTorch form known")
            continue
        b, hq, hkv, n, d, kind = SHAPES[name]
        q = torch.randn(b, hq, n, d, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.randn(b, hkv, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        slopes = torch.randn(hq, dtype=torch.float32, device="cuda")
        gqa = hq != hkv
        if kind in ("plain", "causal"):
            for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        f = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                            q, k, v, is_causal=kind == "causal", enable_gqa=gqa)
                        print(f"peer {name} {label}: {median_ms(f):.4f} ms", flush=True)
                except Exception as e:  # a backend that refuses the shape says so
                    print(f"peer {name} {label}: unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
        if kind in ("plain", "causal") and name not in ("attention", "attention_causal"):
            continue  # (FlexAttention's compile is slow; SDPA is the peer there)
        try:
            f = flex_fn(kind, hq, n, slopes)
            print(f"peer {name} flex: {median_ms(lambda: f(q, k, v, gqa)):.4f} ms", flush=True)
        except Exception as e:
            print(f"peer {name} flex: unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
