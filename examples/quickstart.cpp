// The smallest useful program: ten requests a minute per user, in memory.
#include <cstdio>
#include <exception>

#include <ratelimit/ratelimit.hpp>

int main() try {
    constexpr int kPerMinute = 10;
    constexpr int kRequests = 12;
    ratelimit::TokenBucket<> perUser{ratelimit::Limit::perMinute(kPerMinute)};

    int admitted = 0;
    for (int request = 1; request <= kRequests; ++request) {
        const ratelimit::Decision d = perUser.tryAcquire("user:42");
        if (d) {
            ++admitted;
            std::printf("request %2d: allowed, %lld left\n", request,
                        static_cast<long long>(d.remaining));
        } else {
            // What an HTTP handler sends: 429 with Retry-After in whole seconds, rounded up.
            const auto retrySeconds = std::chrono::ceil<std::chrono::seconds>(d.retryAfter).count();
            std::printf("request %2d: 429 Too Many Requests, Retry-After: %lld\n", request,
                        static_cast<long long>(retrySeconds));
        }
    }
    return admitted == kPerMinute ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 1;
}
