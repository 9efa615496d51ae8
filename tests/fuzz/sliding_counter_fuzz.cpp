// libFuzzer target: the sliding counter (see algorithm_fuzz.hpp for what every input is checked
// against).

#include <cstddef>
#include <cstdint>

#include <ratelimit/algorithms/sliding_counter.hpp>

#include "algorithm_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return rlfuzz::AlgorithmFuzzer<ratelimit::SlidingCounterModel,
                                   ratelimit_test::SlidingCounterRef>::run(data, size);
}
