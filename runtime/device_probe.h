#pragma once
// Measuring the device the cost model describes: timings from CUDA events, the copy ceiling,
// and a DeviceProfile whose constants come from this device instead of the H200 defaults.
#include <cstddef>
#include <vector>

#include "compiler/fusion/device_profile.h"

namespace tilefuse {

struct Timing {
  double median_ms, min_ms, p90_ms;
};
Timing summarize_ms(std::vector<float> ms);

// A device-to-device copy of `bytes`, each of `iters` copies timed with its own events after
// warm-up. Needs a GPU.
Timing time_copy(size_t bytes, int iters);

// The defaults with this device's name and SM count, and its copy bandwidth (bytes read +
// written over the median of 1 GiB copies). Needs a GPU.
DeviceProfile measure_device_profile(int iters = 20);

}  // namespace tilefuse
