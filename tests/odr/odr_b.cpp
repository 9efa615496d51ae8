#include <ratelimit/ratelimit.hpp>

#include "odr/odr.hpp"

namespace ratelimit_odr {

bool tokenBucketFromB() {
    ratelimit::TokenBucket<> bucket{ratelimit::Limit::perSecond(1)};
    const bool first = bucket.tryAcquire("odr-b").allowed;
    const bool second = bucket.tryAcquire("odr-b").allowed;
    return first && !second;
}

}  // namespace ratelimit_odr
