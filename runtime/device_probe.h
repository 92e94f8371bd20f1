#pragma once
// Measuring: timings from CUDA events, the copy ceiling, a DeviceProfile whose constants come from
// this device instead of the H200 defaults, and what a benchmark divides by (the bytes any
// implementation must move, a plan's matmul flops). The CLI's run --bench and bench use these.
#include <cstddef>
#include <string>
#include <vector>

#include "compiler/fusion/device_profile.h"
#include "compiler/fusion/plan.h"

namespace tilefuse {

struct Timing {
  double median_ms, min_ms, p90_ms;
};
Timing summarize_ms(std::vector<float> ms);

// A device-to-device copy of `bytes`, each of `iters` copies timed with its own events after
// warm-up. Needs a GPU.
Timing time_copy(size_t bytes, int iters);

// Every graph input read once and every output written once: the bytes any implementation of the
// graph moves (a benchmark's GB/s divide these by the time).
int64_t minimum_bytes(const Graph& g);
// The multiply-adds (two flops each) of the plan's matmuls.
double plan_flops(const Plan& p);

// The defaults with this device's name and SM count, and its copy bandwidth (bytes read +
// written over the median of 1 GiB copies). Needs a GPU.
DeviceProfile measure_device_profile(int iters = 20);

// cuBLASLt's throughput on this device for each matmul of g it would be offered
// (library_cannot_run empty) into p.library_gemm_flops, by LibraryGemmShape::key: read from earlier
// measurements (library_gemms.txt in the disk cache's folder, by device name and shape; delete it
// to measure again) or
// measured — the median of `iters` runs on random operands after warm-up — and added there.
// Returns how many shapes it measured. Without a GPU or cuBLASLt, p is left as it is.
int measure_library_gemms(const Graph& g, DeviceProfile& p, int iters = 50);

// What a benchmark prints where its predictions are for another device than the GPU `gpu` it
// runs on (the H200's defaults, timed on an H100): that they are, and how to get this device's.
// Empty where either name contains the other (a measured profile carries the GPU's name).
std::string foreign_profile_note(const DeviceProfile& p, const std::string& gpu);

// Where a GPU is present but cuBLASLt does not load, p.library_gemm_missing says why, so that a
// plan for this machine keeps its matmuls (the report names what that loses). Without a GPU, p is
// left as it is: plans are then made for the profile's device.
void note_missing_libraries(DeviceProfile& p);

}  // namespace tilefuse
