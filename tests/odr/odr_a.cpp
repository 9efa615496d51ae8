#include <ratelimit/ratelimit.hpp>

#include "odr/odr.hpp"

namespace ratelimit_odr {

bool tokenBucketFromA() {
    ratelimit::TokenBucket<> bucket{ratelimit::Limit::perSecond(1)};
    const bool first = bucket.tryAcquire("odr-a").allowed;
    const bool second = bucket.tryAcquire("odr-a").allowed;
    return first && !second;
}

}  // namespace ratelimit_odr
