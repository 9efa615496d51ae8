// Tests of include/ratelimit/leasing.hpp over a real redis-server: a lease of n tokens cuts the
// store calls n-fold; hosts of 8 threads each admit exactly the bucket at one instant; the
// over-admission across a refill reaches, and never passes, hosts × (tokens − 1); a lease that
// outlives its lifetime goes back to the store; tokens = 1 decides as the limiter alone. Each
// test starts its own redis-server.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/leasing.hpp>
#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

/// Checks sent to the store: scripts, less the resends after the first NOSCRIPT.
std::uint64_t storeCalls(const RedisStorage& storage) {
    const ratelimit::RedisStats s = storage.stats();
    return s.requests - s.scriptResends;
}

using ratelimit::LeasedLimiter;
using ratelimit::LeaseOptions;
using Bucket = RedisLimiter<ratelimit::TokenBucketModel>;

/// Lease options whose lifetimes run on `clock`, the limiters' ManualClock.
LeaseOptions leaseOptions(std::int64_t tokens, const ManualClock& clock,
                          std::chrono::milliseconds lifetime = 10s) {
    LeaseOptions o;
    o.tokens = tokens;
    o.lifetime = lifetime;
    o.clock = [&clock] {
        return std::chrono::steady_clock::time_point(
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                clock.now().time_since_epoch()));
    };
    return o;
}

/// Hosts sharing one server: each its own RedisStorage (connections) and LeasedLimiter of a
/// bucket of `limit`, named `name`, on the test's ManualClock.
class Hosts {
public:
    Hosts(const RedisServer& server, std::size_t count, const Limit& limit, const std::string& name,
          std::int64_t tokens, const ManualClock& clock) {
        for (std::size_t h = 0; h < count; ++h) {
            storages_.push_back(std::make_unique<RedisStorage>(storageOptions(server, "rl-lease")));
            leased_.push_back(std::make_unique<LeasedLimiter<Bucket>>(
                Bucket(limit, *storages_.back(), clock, limiterOptions(name)),
                leaseOptions(tokens, clock)));
        }
    }

    /// `threads` threads of every host, started together, each send `requests` on `key`;
    /// returns their admissions.
    std::int64_t hammer(const std::string& key, std::size_t threads, int requests) {
        std::atomic<std::int64_t> admitted{0};
        std::latch start(static_cast<std::ptrdiff_t>(leased_.size() * threads));
        std::vector<std::thread> running;
        running.reserve(leased_.size() * threads);
        for (const auto& host : leased_) {
            for (std::size_t t = 0; t < threads; ++t) {
                running.emplace_back([&, h = host.get()] {
                    start.arrive_and_wait();
                    for (int i = 0; i < requests; ++i) {
                        admitted += h->tryAcquire(key).allowed ? 1 : 0;
                    }
                });
            }
        }
        for (std::thread& t : running) {
            t.join();
        }
        return admitted.load();
    }

    /// The store calls of every host.
    [[nodiscard]] std::uint64_t calls() const {
        std::uint64_t n = 0;
        for (const auto& s : storages_) {
            n += storeCalls(*s);
        }
        return n;
    }

    LeasedLimiter<Bucket>& operator[](std::size_t h) { return *leased_.at(h); }
    [[nodiscard]] std::size_t size() const noexcept { return leased_.size(); }
    RedisStorage& storage(std::size_t h) { return *storages_.at(h); }

private:
    std::vector<std::unique_ptr<RedisStorage>> storages_;
    std::vector<std::unique_ptr<LeasedLimiter<Bucket>>> leased_;
};

}  // namespace

TEMPLATE_TEST_CASE("LeasedLimiter: a lease of n tokens makes one store call per n requests",
                   "[redis][leasing]", ratelimit::TokenBucketModel, ratelimit::LeakyBucketModel) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    using Limiter = RedisLimiter<TestType>;
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    LeasedLimiter<Limiter> leased(
        Limiter(Limit::perHour(10).withBurst(5000), storage, clock, limiterOptions("calls")),
        leaseOptions(10, clock));
    for (int i = 0; i < 1000; ++i) {
        const Decision d = leased.tryAcquire("hot");
        REQUIRE(d.allowed);
        REQUIRE(d.remaining == 5000 - 1 - i);  // the store's, plus the lease's unspent tokens
    }
    CHECK(storeCalls(storage) == 100);
    CHECK(leased.peek("hot", 0).remaining == 4000);  // every leased token spent in the store
    // A cost of 3 from a lease of 10 holding 0: a new lease of 12 (its cost and 9 more).
    CHECK(leased.tryAcquire("hot", 3).remaining == 3997);
    CHECK(leased.peek("hot", 0).remaining == 3988);
    CHECK(leased.tryAcquire("hot", 9).allowed);  // from the lease
    CHECK(storeCalls(storage) == 103);           // the two peeks and the one lease
}

TEST_CASE("LeasedLimiter: 8 threads on each of 4 hosts admit exactly the bucket at one instant",
          "[redis][leasing][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr std::int64_t kBurst = 500;
    ManualClock clock;  // frozen: nothing refills
    Hosts hosts(*server, 4, Limit::perHour(1).withBurst(kBurst), "hosts", 16, clock);
    // 4 × 8 × 40 = 1280 attempts on 500 tokens: none over the bucket, and with the leases
    // returned, every admission is exactly one token spent in the store.
    const std::int64_t admitted = hosts.hammer("contended", 8, 40);
    CHECK(admitted <= kBurst);
    CHECK(admitted >= kBurst - std::int64_t{60});  // at most 15 leased tokens left in each of 4
    for (std::size_t h = 0; h < hosts.size(); ++h) {
        hosts[h].returnLeases();
    }
    CHECK(hosts[0].peek("contended", 0).remaining == kBurst - admitted);
    // 4 × 8 × 12 = 384 attempts within the bucket: all admitted, about one call per lease
    // (a host's threads wait for the one taking its lease).
    const std::uint64_t before = hosts.calls();
    CHECK(hosts.hammer("within", 8, 12) == 384);
    const std::uint64_t spent = hosts.calls() - before;
    INFO("store calls: " << spent);
    CHECK(spent <= 384 / 16 + 4 * 8);
}

TEST_CASE("LeasedLimiter: across a refill the over-admission reaches hosts x (tokens - 1), no more",
          "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    const Limit limit = Limit::perSecond(10).withBurst(10);
    constexpr std::int64_t kTokens = 5;
    LeasedLimiter<Bucket> a(Bucket(limit, storage, clock, limiterOptions("refill")),
                            leaseOptions(kTokens, clock));
    LeasedLimiter<Bucket> b(Bucket(limit, storage, clock, limiterOptions("refill")),
                            leaseOptions(kTokens, clock));
    Bucket exact(limit, storage, clock, limiterOptions("refill"));
    // The same requests on a bucket of the test's own, for what the exact bucket admits.
    Bucket reference(limit, storage, clock, limiterOptions("refill-reference"));
    std::int64_t admitted = 0;
    std::int64_t exactAdmitted = 0;
    const auto request = [&](auto& limiter) {
        admitted += limiter.tryAcquire("k").allowed ? 1 : 0;
        exactAdmitted += reference.tryAcquire("k").allowed ? 1 : 0;
    };
    request(a);         // takes 5: 4 unspent
    request(b);         // takes 5: 4 unspent, the bucket empty
    clock.advance(1s);  // full again
    for (int i = 0; i < 30; ++i) {
        request(a);
        request(b);
        request(exact);
    }
    CHECK(exactAdmitted == 12);                            // 2, then a full bucket of 10
    CHECK(admitted - exactAdmitted == 2 * (kTokens - 1));  // the leases spent after the refill
}

TEST_CASE("LeasedLimiter: 8 threads of one host hold one lease, so the bound is per host",
          "[redis][leasing][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr std::int64_t kTokens = 5;
    ManualClock clock;
    const Limit limit = Limit::perSecond(100).withBurst(100);
    Hosts hosts(*server, 2, limit, "per-host", kTokens, clock);
    std::int64_t admitted = 0;
    admitted += hosts.hammer("k", 8, 1);  // 16 requests within the bucket: each host leases
    REQUIRE(admitted == 16);
    clock.advance(1s);                     // the bucket full again, whatever the hosts hold
    admitted += hosts.hammer("k", 8, 10);  // 160 more requests
    Bucket exact(limit, hosts.storage(0), clock, limiterOptions("per-host"));
    for (int i = 0; i < 200; ++i) {
        admitted += exact.tryAcquire("k").allowed ? 1 : 0;
    }
    // The exact bucket admits the 16, then a full bucket of 100; each host adds at most what
    // its one lease held unspent.
    INFO("admitted " << admitted);
    CHECK(admitted <= 16 + 100 + 2 * (kTokens - 1));
    CHECK(admitted >= 16 + 100);
}

TEST_CASE("LeasedLimiter: a key beyond maxKeys goes to the store for its own cost",
          "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    LeaseOptions options = leaseOptions(16, clock);
    options.maxKeys = 1;
    LeasedLimiter<Bucket> leased(
        Bucket(Limit::perHour(1).withBurst(40), storage, clock, limiterOptions("full")), options);
    CHECK(leased.tryAcquire("first").allowed);  // takes the one lease
    for (int i = 0; i < 10; ++i) {
        CHECK(leased.tryAcquire("second").allowed);
    }
    // No lease spent beside the requests: each one took its own token, no more.
    CHECK(leased.peek("second", 0).remaining == 30);
    CHECK(leased.peek("first", 0).remaining == 24);
}

TEST_CASE("LeasedLimiter: what a lease leaves unspent goes back after its lifetime",
          "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    LeasedLimiter<Bucket> leased(
        Bucket(Limit::perHour(1).withBurst(100), storage, clock, limiterOptions("lifetime")),
        leaseOptions(10, clock, 2s));
    CHECK(leased.tryAcquire("k").allowed);
    CHECK(leased.peek("k", 0).remaining == 90);
    clock.advance(1999ms);
    CHECK(leased.tryAcquire("k").allowed);  // still from the lease
    CHECK(storeCalls(storage) == 2);        // the lease, and the peek
    clock.advance(1ms);
    CHECK(leased.tryAcquire("k").allowed);  // the 8 unspent go back, a new lease of 10
    CHECK(storeCalls(storage) == 4);        // and the refund, and the new lease
    CHECK(leased.peek("k", 0).remaining == 88);
    leased.returnLeases();
    CHECK(leased.peek("k", 0).remaining == 97);  // 3 requests admitted in all
}

TEST_CASE("LeasedLimiter: a lease of one token decides as the limiter alone", "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    const Limit limit = Limit::perSecond(5).withBurst(3);
    LeasedLimiter<Bucket> leased(Bucket(limit, storage, clock, limiterOptions("one")),
                                 leaseOptions(1, clock));
    Bucket alone(limit, storage, clock, limiterOptions("alone"));
    for (int i = 0; i < 200; ++i) {
        clock.advance(std::chrono::milliseconds((i * 37) % 150));
        const Decision l = leased.tryAcquire("k");
        const Decision r = alone.tryAcquire("k");
        INFO("request " << i);
        REQUIRE(parity(r, l).empty());
    }
    CHECK(storeCalls(storage) == 400);
}

TEST_CASE("LeasedLimiter: a store that fails gives the policy's answer for the request alone",
          "[redis][leasing]") {
    ratelimit::RedisStorage::Options options;
    options.unixSocket = "/nonexistent/ratelimit-lease.sock";
    options.timeout = 50ms;
    const RedisStorage storage(options);
    ManualClock clock;
    LeasedLimiter<Bucket> leased(Bucket(Limit::perMinute(10).withBurst(20), storage, clock,
                                        limiterOptions("down", FailurePolicy::kFailOpen)),
                                 leaseOptions(16, clock));
    for (int i = 0; i < 3; ++i) {
        const Decision d = leased.tryAcquire("k");
        INFO("request " << i);
        CHECK(d.degraded);
        CHECK(d.allowed);
        CHECK(d.remaining == 19);  // fail-open's figure for a cost of 1, not of a lease of 16
    }
}

TEST_CASE("LeaseOptions: out of range, named at construction", "[leasing]") {
    ManualClock clock;
    const auto rejects = [&](LeaseOptions o, const std::string& field) {
        INFO(field);
        try {
            const LeasedLimiter<MemoryLimiter<ratelimit::TokenBucketModel>> l(
                MemoryLimiter<ratelimit::TokenBucketModel>(Limit::perSecond(1), MemoryStorage{},
                                                           clock),
                std::move(o));
            FAIL("accepted");
        } catch (const std::invalid_argument& e) {
            CHECK_THAT(e.what(), Catch::Matchers::Contains(field));
        }
    };
    LeaseOptions o;
    o.tokens = 0;
    rejects(o, "LeaseOptions.tokens");
    o = {};
    o.tokens = (std::int64_t{1} << 20) + 1;
    rejects(o, "LeaseOptions.tokens");
    o = {};
    o.lifetime = 0ms;
    rejects(o, "LeaseOptions.lifetime");
    o = {};
    o.maxKeys = 0;
    rejects(o, "LeaseOptions.maxKeys");
    ratelimit::LimiterOptions dryRun;
    dryRun.dryRun = true;
    try {
        const LeasedLimiter<MemoryLimiter<ratelimit::TokenBucketModel>> l(
            MemoryLimiter<ratelimit::TokenBucketModel>(Limit::perSecond(1), MemoryStorage{}, clock,
                                                       dryRun));
        FAIL("accepted a dry run");
    } catch (const std::invalid_argument& e) {
        CHECK_THAT(e.what(), Catch::Matchers::Contains("LimiterOptions.dryRun"));
    }
}

}  // namespace ratelimit_test
