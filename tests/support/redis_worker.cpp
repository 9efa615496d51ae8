// ratelimit_redis_worker: one process of the multi-process exactness tests in
// tests/storage/redis_concurrency_test.cpp. It builds one Redis limiter with a ManualClock frozen
// at the given instant, connects (a cost-0 peek of another key), waits for the start signal (one
// byte, or end of file, on stdin), then tries `attempts` requests of cost 1 on `key` and prints
// how many were admitted.
//
//   ratelimit_redis_worker <unix socket> <key prefix> <limiter name> <model> <count>
//                          <period µs> <burst> <now µs | system> <attempts> <key> [<threads>
//                          [<lease tokens>]]
//
// `cluster:<host>:<port>,<host>:<port>...` in place of the socket reaches a Redis Cluster
// through those seed nodes. With <threads> (default 1), that many threads share the attempts
// (each `attempts / threads`) and the admissions printed are theirs together.
//
// With <lease tokens> above 0 (token_bucket or leaky_bucket only), the threads ask a
// `LeasedLimiter` of that many tokens a lease (the other lease options their defaults), which
// gives its leases back when they are done; the worker prints
// "<admitted> <first µs> <last µs> <store calls>": the clock read before the first request and
// after the last, and the scripts sent for the requests (not the connecting peek, nor the
// leases given back).
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

#include <algorithm>
#include <atomic>
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
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include <ratelimit/leasing.hpp>
#include <ratelimit/redis.hpp>

namespace {

struct Arguments {
    std::string socket;
    std::vector<ratelimit::RedisNodeAddress> cluster;
    std::string keyPrefix;
    std::string name;
    std::string model;
    std::int64_t count = 0;
    std::int64_t periodUs = 0;
    std::int64_t burst = 0;
    std::optional<std::int64_t> nowUs;  ///< none: the system clock
    std::int64_t attempts = 0;
    std::string key;
    std::int64_t threads = 1;
    std::int64_t leaseTokens = 0;  ///< 0: no LeasedLimiter
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

/// The seed nodes of `cluster:<host>:<port>,...`; empty for a socket path.
std::vector<ratelimit::RedisNodeAddress> clusterOf(std::string_view text) {
    constexpr std::string_view kCluster = "cluster:";
    std::vector<ratelimit::RedisNodeAddress> seeds;
    if (!text.starts_with(kCluster)) {
        return seeds;
    }
    text.remove_prefix(kCluster.size());
    while (!text.empty()) {
        const std::string_view node = text.substr(0, text.find(','));
        text.remove_prefix(std::min(text.size(), node.size() + 1));
        const std::size_t colon = node.rfind(':');
        if (colon == std::string_view::npos) {
            throw UsageError("a cluster node needs <host>:<port>: '" + std::string(node) + "'");
        }
        seeds.push_back({std::string(node.substr(0, colon)),
                         static_cast<int>(number(node.substr(colon + 1), "port"))});
    }
    return seeds;
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

template <class TimePoint>
std::int64_t microsOf(TimePoint t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

/// `a.threads` threads, each trying `a.attempts / a.threads` requests that `tryOne` answers;
/// returns their admissions together.
template <class TryOne>
std::int64_t admittedByThreads(const Arguments& a, TryOne tryOne) {
    std::atomic<std::int64_t> together{0};
    std::vector<std::thread> threads;
    for (std::int64_t t = 0; t < a.threads; ++t) {
        threads.emplace_back([&] {
            for (std::int64_t i = 0; i < a.attempts / a.threads; ++i) {
                if (tryOne()) {
                    together.fetch_add(1);
                }
            }
        });
    }
    for (std::thread& t : threads) {
        t.join();
    }
    return together.load();
}

std::uint64_t storeCalls(const ratelimit::RedisStorage& storage) {
    const ratelimit::RedisStats s = storage.stats();
    return s.requests - s.scriptResends;
}

template <class L, class Clock>
int runLeased(const Arguments& a, const Clock& clock, L limiter,
              const ratelimit::RedisStorage& storage) {
    ratelimit::LeaseOptions options;
    options.tokens = a.leaseTokens;
    ratelimit::LeasedLimiter<L> leased(std::move(limiter), options);
    waitForStart();
    const std::uint64_t callsBefore = storeCalls(storage);
    const std::int64_t first = microsOf(clock.now());
    const std::int64_t admitted =
        admittedByThreads(a, [&] { return leased.tryAcquire(a.key).allowed; });
    const std::int64_t last = microsOf(clock.now());
    const std::uint64_t calls = storeCalls(storage) - callsBefore;
    leased.returnLeases();
    std::cout << admitted << ' ' << first << ' ' << last << ' ' << calls << '\n' << std::flush;
    return 0;
}

template <class Model, class Clock>
int run(const Arguments& a, const Clock& clock) {
    ratelimit::RedisStorage::Options options;
    options.unixSocket = a.socket;
    if (!a.cluster.empty()) {
        options.unixSocket.clear();
        options.cluster = a.cluster;
    }
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
    if constexpr (std::is_same_v<Model, ratelimit::TokenBucketModel> ||
                  std::is_same_v<Model, ratelimit::LeakyBucketModel>) {
        if (a.leaseTokens > 0) {
            return runLeased(a, clock, std::move(limiter), storage);
        }
    }
    if (a.leaseTokens > 0) {
        throw UsageError("only token_bucket and leaky_bucket lease");
    }
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
        admitted = admittedByThreads(a, [&] { return limiter.tryAcquire(a.key, 1).allowed; });
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
        if (argc < 11 || argc > 13) {
            throw UsageError("expected 10 to 12 arguments, got " + std::to_string(argc - 1));
        }
        Arguments a;
        a.socket = argv[1];
        a.cluster = clusterOf(a.socket);
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
        if (argc >= 12) {
            a.threads = number(argv[11], "threads");
            if (a.threads < 1) {
                throw UsageError("threads must be at least 1");
            }
        }
        if (argc == 13) {
            a.leaseTokens = number(argv[12], "lease tokens");
        }
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
