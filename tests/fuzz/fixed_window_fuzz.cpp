// libFuzzer target: the fixed window (see algorithm_fuzz.hpp for what every input is checked
// against).

#include <cstddef>
#include <cstdint>

#include <ratelimit/algorithms/fixed_window.hpp>

#include "algorithm_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return rlfuzz::AlgorithmFuzzer<ratelimit::FixedWindowModel,
                                   ratelimit_test::FixedWindowRef>::run(data, size);
}
