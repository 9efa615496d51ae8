#include "odr/odr.hpp"

#include "support/catch.hpp"

TEST_CASE("ODR: two translation units including ratelimit.hpp link into one program",
          "[ratelimit]") {
    CHECK(ratelimit_odr::tokenBucketFromA());
    CHECK(ratelimit_odr::tokenBucketFromB());
}
