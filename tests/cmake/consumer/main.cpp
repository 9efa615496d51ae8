// Consumer smoke test: the installed (or add_subdirectory'd) library compiles, links and works.
// Exits 0 iff a 2/s token bucket admits two requests and refuses the third.
#include <ratelimit/ratelimit.hpp>

int main() {
    ratelimit::TokenBucket<> tb{ratelimit::Limit::perSecond(2)};
    const bool first = tb.tryAcquire("k").allowed;
    const bool second = tb.tryAcquire("k").allowed;
    const bool third = tb.tryAcquire("k").allowed;
    return (first && second && !third) ? 0 : 1;
}
