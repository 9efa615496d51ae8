// ratelimit_redis_worker: one process of the multi-process exactness tests in
// tests/storage/redis_concurrency_test.cpp. It builds one Redis limiter with a ManualClock frozen
// at the given instant, connects (a cost-0 peek of another key), waits for the start signal (one
// byte, or end of file, on stdin), then tries `attempts` requests of cost 1 on `key` and prints
// how many were admitted.
//
//   ratelimit_redis_worker <unix socket> <key prefix> <limiter name> <model> <count>
//                          <period µs> <burst> <now µs | system> <attempts> <key>
//
// With `system` instead of an instant, the limiter's clock is the SystemClock and each request
// passes the time read just before it, with the default options, as a host sharing Redis does;
// the worker then also prints the time read before its first request and after its last one
// (µs since the epoch): "<admitted> <first µs> <last µs>".
//
// <model> is fixed_window, sliding_log, sliding_counter, token_bucket or leaky_bucket, or the
// limit set token_bucket+fixed_window: that bucket, and a fixed window of <count> per <period>.
// Exit status: 0 and the admitted count on stdout; 2 for a bad command line; 3 when the store
// failed (the limiter throws instead of degrading, so a failure can never pass as a decision).

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unistd.h>

#include <ratelimit/redis.hpp>

namespace {

struct Arguments {
    std::string socket;
    std::string keyPrefix;
    std::string name;
    std::string model;
    std::int64_t count = 0;
    std::int64_t periodUs = 0;
    std::int64_t burst = 0;
    std::optional<std::int64_t> nowUs;  ///< none: the system clock
    std::int64_t attempts = 0;
    std::string key;
};

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

std::int64_t number(std::string_view text, std::string_view what) {
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size()) {
        throw UsageError(std::string(what) + " is not a whole number: '" + std::string(text) + "'");
    }
    return value;
}

void waitForStart() {
    char go = 0;
    for (;;) {
        const ssize_t n = ::read(STDIN_FILENO, &go, 1);
        if (n >= 0 || errno != EINTR) {
            return;  // the byte, end of file or an error: start either way
        }
    }
}

std::int64_t microsOf(ratelimit::SystemClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

template <class Model, class Clock>
int run(const Arguments& a, const Clock& clock) {
    ratelimit::RedisStorage::Options options;
    options.unixSocket = a.socket;
    options.keyPrefix = a.keyPrefix;
    options.timeout = std::chrono::milliseconds{5000};
    const ratelimit::RedisStorage storage(options);

    ratelimit::LimiterOptions limiterOptions;
    limiterOptions.name = a.name;
    limiterOptions.failurePolicy = ratelimit::FailurePolicy::kThrow;
    const ratelimit::Limit window =
        ratelimit::Limit::per(a.count, std::chrono::microseconds{a.periodUs});
    const ratelimit::Limit limit = window.withBurst(a.burst);
    ratelimit::LimitOf<Model> limits = [&] {
        if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
            return ratelimit::LimitOf<Model>{limit, window};
        } else {
            return limit;
        }
    }();
    ratelimit::Limiter<Model, ratelimit::RedisStorage, Clock> limiter(limits, storage, clock,
                                                                      limiterOptions);

    (void)limiter.peek(a.key + "#connect", 0);  // opens the connection before the start
    waitForStart();
    std::int64_t admitted = 0;
    if constexpr (std::is_same_v<Clock, ratelimit::SystemClock>) {
        const std::int64_t first = microsOf(clock.now());
        for (std::int64_t i = 0; i < a.attempts; ++i) {
            if (limiter.tryAcquire(a.key, 1, clock.now()).allowed) {
                ++admitted;
            }
        }
        std::cout << admitted << ' ' << first << ' ' << microsOf(clock.now()) << '\n' << std::flush;
    } else {
        for (std::int64_t i = 0; i < a.attempts; ++i) {
            if (limiter.tryAcquire(a.key, 1).allowed) {
                ++admitted;
            }
        }
        std::cout << admitted << '\n' << std::flush;
    }
    return 0;
}

template <class Model>
int run(const Arguments& a) {
    if (!a.nowUs) {
        return run<Model>(a, ratelimit::SystemClock{});
    }
    ratelimit::ManualClock clock;
    clock.set(std::chrono::microseconds{*a.nowUs});
    return run<Model>(a, clock);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc != 11) {
            throw UsageError("expected 10 arguments, got " + std::to_string(argc - 1));
        }
        Arguments a;
        a.socket = argv[1];
        a.keyPrefix = argv[2];
        a.name = argv[3];
        a.model = argv[4];
        a.count = number(argv[5], "count");
        a.periodUs = number(argv[6], "period");
        a.burst = number(argv[7], "burst");
        if (std::string_view{argv[8]} != "system") {
            a.nowUs = number(argv[8], "now");
        }
        a.attempts = number(argv[9], "attempts");
        a.key = argv[10];
        if (a.model == ratelimit::FixedWindowModel::kName) {
            return run<ratelimit::FixedWindowModel>(a);
        }
        if (a.model == ratelimit::SlidingLogModel::kName) {
            return run<ratelimit::SlidingLogModel>(a);
        }
        if (a.model == ratelimit::SlidingCounterModel::kName) {
            return run<ratelimit::SlidingCounterModel>(a);
        }
        if (a.model == ratelimit::TokenBucketModel::kName) {
            return run<ratelimit::TokenBucketModel>(a);
        }
        if (a.model == ratelimit::LeakyBucketModel::kName) {
            return run<ratelimit::LeakyBucketModel>(a);
        }
        using Set = ratelimit::LimitSet<ratelimit::TokenBucketModel, ratelimit::FixedWindowModel>;
        if (a.model == Set::kName) {
            return run<Set>(a);
        }
        throw UsageError("unknown model '" + a.model + "'");
    } catch (const UsageError& e) {
        std::cerr << "ratelimit_redis_worker: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "ratelimit_redis_worker: " << e.what() << '\n';
        return 3;
    }
}
