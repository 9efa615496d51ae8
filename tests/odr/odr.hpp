#pragma once

// Two translation units (odr_a.cpp, odr_b.cpp) include <ratelimit/ratelimit.hpp> and use the
// same templates; linking them into one program catches non-inline definitions in headers
// (multiple-definition errors at link time).

namespace ratelimit_odr {

/// From odr_a.cpp: a fresh TokenBucket of 1/s admits one request and refuses the next.
bool tokenBucketFromA();

/// From odr_b.cpp: the same scenario, compiled in another translation unit.
bool tokenBucketFromB();

}  // namespace ratelimit_odr
