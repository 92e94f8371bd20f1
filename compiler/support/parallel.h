#pragma once
// Splits [0, n) into one contiguous chunk per hardware thread. Used by the host-side reference
// and input generation, whose tensors reach 2^29 elements.
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace tilefuse {

template <typename F>  // f(begin, end, chunk_index)
void parallel_chunks(int64_t n, F f, int64_t min_chunk = 1 << 16) {
  int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  int64_t chunks = std::clamp<int64_t>(n / min_chunk, 1, threads);
  if (chunks == 1) return f(int64_t{0}, n, int64_t{0});
  std::vector<std::thread> pool;
  int64_t step = (n + chunks - 1) / chunks;
  for (int64_t c = 0; c < chunks; ++c)
    pool.emplace_back([=, &f] { f(c * step, std::min(n, (c + 1) * step), c); });
  for (std::thread& t : pool) t.join();
}

}  // namespace tilefuse
