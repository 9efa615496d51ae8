// libFuzzer target: the leaky bucket (GCRA), against the token bucket's reference (see
// algorithm_fuzz.hpp for what every input is checked against).

#include <cstddef>
#include <cstdint>

#include <ratelimit/algorithms/leaky_bucket.hpp>

#include "algorithm_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return rlfuzz::AlgorithmFuzzer<ratelimit::LeakyBucketModel, ratelimit_test::BucketRef>::run(
        data, size);
}
