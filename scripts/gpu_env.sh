# Sourced by the GPU scripts, from the repository root: the bundle (B), the folder for logs
# (OUT), and where runtime/cublaslt.h finds cuBLASLt when the loader and the toolkit do not have
# it — the copy PyTorch's wheels bring (nvidia/cu13/lib or nvidia/cublas/lib).
B=bundle
OUT=${OUT:-/tmp/tilefuse-gpu}
mkdir -p "$OUT"
if [ -z "${TILEFUSE_CUBLASLT:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt.so.13 ' &&
  [ ! -e /usr/local/cuda/lib64/libcublasLt.so.13 ] && [ ! -e /usr/local/cuda/lib/libcublasLt.so.13 ]; then
  TILEFUSE_CUBLASLT=$(python3 - 2>/dev/null <<'PY'
import glob, site
paths = []
for p in site.getsitepackages():
    paths += glob.glob(p + "/nvidia/cu*/lib/libcublasLt.so.13") + glob.glob(p + "/nvidia/cublas/lib/libcublasLt.so.13")
print(sorted(paths)[0] if paths else "")
PY
  )
  [ -n "$TILEFUSE_CUBLASLT" ] && export TILEFUSE_CUBLASLT
fi
