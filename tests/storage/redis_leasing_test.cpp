// Tests of include/ratelimit/leasing.hpp over a real redis-server: a lease of n tokens cuts the
// store calls n-fold, renewals included; hosts of 8 threads each, in one process or in 4
// processes, admit exactly the bucket at one instant; a renewal under way holds up no other
// request; the over-admission across a refill reaches, and never passes,
// hosts × (tokens − 1 + renewBelow); a lease that outlives half its lifetime goes back to the
// store, at the host's next request on any key; the key's ledger gives back the lease of a host
// that died a lifetime after its last call, and a host whose lease was taken back pays again
// what it spent; tokens = 1 decides as the limiter alone. Each test starts its own redis-server.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <latch>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <ratelimit/leasing.hpp>
#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"
#include "support/worker_process.hpp"

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
                          std::chrono::milliseconds lifetime = 10s,
                          std::optional<std::int64_t> renewBelow = {}) {
    LeaseOptions o;
    o.tokens = tokens;
    o.lifetime = lifetime;
    o.renewBelow = renewBelow;
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
          std::int64_t tokens, const ManualClock& clock,
          std::optional<std::int64_t> renewBelow = {}) {
        for (std::size_t h = 0; h < count; ++h) {
            storages_.push_back(std::make_unique<RedisStorage>(storageOptions(server, "rl-lease")));
            leased_.push_back(std::make_unique<LeasedLimiter<Bucket>>(
                Bucket(limit, *storages_.back(), clock, limiterOptions(name)),
                leaseOptions(tokens, clock, 10s, renewBelow)));
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

/// What one leasing worker printed.
struct WorkerFigures {
    std::int64_t admitted = 0;
    std::int64_t firstUs = 0;  ///< its clock before its first request
    std::int64_t lastUs = 0;   ///< and after its last
    std::uint64_t calls = 0;   ///< store calls for its requests
};

/// Four worker processes of 8 threads each, leasing `tokens` at a time from the token bucket
/// `name` of `limit` on `key`, at the instant `now` (µs, or "system"), `attempts` requests each,
/// started together; returns what each printed.
std::vector<WorkerFigures> leasingWorkers(const RedisServer& server, const Limit& limit,
                                          const std::string& name, const std::string& key,
                                          const std::string& now, std::int64_t attempts,
                                          std::int64_t tokens) {
    REQUIRE(::access(kWorker, X_OK) == 0);
    const auto periodUs = std::chrono::duration_cast<std::chrono::microseconds>(limit.period);
    std::vector<std::unique_ptr<WorkerProcess>> workers;
    workers.reserve(4);
    for (int i = 0; i < 4; ++i) {
        workers.push_back(std::make_unique<WorkerProcess>(
            std::vector<std::string>{kWorker, server.unixSocket(), "rl-lease", name, "token_bucket",
                                     std::to_string(limit.count), std::to_string(periodUs.count()),
                                     std::to_string(limit.burst), now, std::to_string(attempts),
                                     key, "8", std::to_string(tokens)},
            server.directory() + "/" + name + std::to_string(i)));
    }
    for (const auto& w : workers) {
        w->go();
    }
    std::vector<WorkerFigures> figures;
    figures.reserve(workers.size());
    for (const auto& w : workers) {
        const WorkerProcess::Result r = w->wait();
        INFO("worker stdout: " << r.out << " stderr: " << r.err);
        REQUIRE(WIFEXITED(r.status));
        REQUIRE(WEXITSTATUS(r.status) == 0);
        std::istringstream out(r.out);
        WorkerFigures f;
        REQUIRE(out >> f.admitted >> f.firstUs >> f.lastUs >> f.calls);
        figures.push_back(f);
    }
    return figures;
}

/// Sends `requests` on "hot", each admitted with `remaining` exactly what a bucket of `burst`
/// has left after it: the store's figure plus the lease's unspent tokens.
template <class L>
void requireEachRemaining(LeasedLimiter<L>& leased, int requests, std::int64_t burst) {
    for (int i = 0; i < requests; ++i) {
        const Decision d = leased.tryAcquire("hot");
        INFO("request " << i);
        REQUIRE(d.allowed);
        REQUIRE(d.remaining == burst - 1 - i);
    }
}

/// What `raceAcrossRefill` counted.
struct RefillRace {
    std::int64_t admitted = 0;            ///< by the two hosts and the plain limiter
    std::int64_t exactAdmitted = 0;       ///< by a bucket of its own, sent the same requests
    std::int64_t leasedBeforeRefill = 0;  ///< the store's tokens spent before the refill
};

/// Two hosts leasing `tokens` (renewed below `renewBelow`) from one bucket of `limit` beside a
/// plain limiter of it: `warmUp` requests on each host, then `refill` passes, then 30 rounds of
/// a request on each host and on the plain limiter. A reference bucket of its own is sent the
/// same requests at the same times, for what the exact bucket admits.
RefillRace raceAcrossRefill(const RedisServer& server, const Limit& limit, std::int64_t tokens,
                            std::int64_t renewBelow, int warmUp, std::chrono::seconds refill) {
    const RedisStorage storage(storageOptions(server, "rl-lease"));
    ManualClock clock;
    const std::string name = "refill-" + std::to_string(renewBelow);
    LeasedLimiter<Bucket> a(Bucket(limit, storage, clock, limiterOptions(name)),
                            leaseOptions(tokens, clock, 10s, renewBelow));
    LeasedLimiter<Bucket> b(Bucket(limit, storage, clock, limiterOptions(name)),
                            leaseOptions(tokens, clock, 10s, renewBelow));
    Bucket plain(limit, storage, clock, limiterOptions(name));
    Bucket reference(limit, storage, clock, limiterOptions(name + "-reference"));
    RefillRace race;
    const auto request = [&](auto& limiter) {
        race.admitted += limiter.tryAcquire("k").allowed ? 1 : 0;
        race.exactAdmitted += reference.tryAcquire("k").allowed ? 1 : 0;
    };
    for (int i = 0; i < warmUp; ++i) {
        request(a);
        request(b);
    }
    race.leasedBeforeRefill = limit.burst - plain.peek("k", 0).remaining;
    clock.advance(refill);
    for (int i = 0; i < 30; ++i) {
        request(a);
        request(b);
        request(plain);
    }
    return race;
}

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
    const auto leasedOf = [&](std::int64_t renewBelow) {
        return LeasedLimiter<Limiter>(
            Limiter(Limit::perHour(10).withBurst(5000), storage, clock, limiterOptions("calls")),
            leaseOptions(10, clock, 10s, renewBelow));
    };
    SECTION("a new lease only when one runs out") {
        LeasedLimiter<Limiter> leased = leasedOf(0);
        requireEachRemaining(leased, 1000, 5000);
        CHECK(storeCalls(storage) == 100);
        CHECK(leased.peek("hot", 0).remaining == 4000);  // every leased token spent in the store
        // A cost of 3 from a lease of 10 holding 0: a new lease of 12 (its cost and 9 more).
        CHECK(leased.tryAcquire("hot", 3).remaining == 3997);
        CHECK(leased.peek("hot", 0).remaining == 3988);
        CHECK(leased.tryAcquire("hot", 9).allowed);  // from the lease
        CHECK(storeCalls(storage) == 103);           // the two peeks and the one lease
    }
    SECTION("renewed when a request leaves fewer than renewBelow") {
        LeasedLimiter<Limiter> leased = leasedOf(4);
        requireEachRemaining(leased, 1000, 5000);  // the renewed tokens counted once
        // The first lease, then a renewal of 10 each time a request left 3: the last after the
        // 997th request. Still one call per 10 requests, and 10 left unspent.
        CHECK(storeCalls(storage) == 101);
        CHECK(leased.peek("hot", 0).remaining == 3990);
        leased.returnLeases();
        CHECK(leased.peek("hot", 0).remaining == 4000);
    }
}

TEST_CASE("LeasedLimiter: renewBelow defaults to a quarter of the lease", "[leasing]") {
    ManualClock clock;
    const auto renewBelow = [&](std::int64_t tokens) {
        LeaseOptions o;
        o.tokens = tokens;
        const LeasedLimiter<MemoryLimiter<ratelimit::TokenBucketModel>> l(
            MemoryLimiter<ratelimit::TokenBucketModel>(Limit::perSecond(1), MemoryStorage{}, clock),
            o);
        return l.options().renewBelow.value_or(-1);
    };
    CHECK(renewBelow(16) == 4);
    CHECK(renewBelow(3) == 0);
    CHECK(renewBelow(1) == 0);
}

TEST_CASE("LeasedLimiter: in memory, an ended lease's unspent tokens go back at the next request",
          "[leasing]") {
    ManualClock clock;
    using Memory = MemoryLimiter<ratelimit::TokenBucketModel>;
    LeasedLimiter<Memory> leased(Memory(Limit::perHour(1).withBurst(100), MemoryStorage{}, clock),
                                 leaseOptions(10, clock, 4s, 0));  // answered from for 2 s
    for (int i = 0; i < 4; ++i) {
        REQUIRE(leased.tryAcquire("k").allowed);  // 4 of a lease of 10: 6 unspent
    }
    CHECK(leased.peek("k", 0).remaining == 90);
    clock.advance(1999ms);
    REQUIRE(leased.tryAcquire("other").allowed);  // the lease on "k" still runs
    CHECK(leased.peek("k", 0).remaining == 90);
    clock.advance(1ms);
    REQUIRE(leased.tryAcquire("other").allowed);  // from its lease, after settling "k"'s
    CHECK(leased.peek("k", 0).remaining == 96);
    CHECK(leased.peek("other", 0).remaining == 90);
}

TEST_CASE("LeasedLimiter: a renewal under way holds up none of the host's other requests",
          "[redis][leasing][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    LeasedLimiter<Bucket> leased(
        Bucket(Limit::perHour(1).withBurst(100), storage, clock, limiterOptions("renewing")),
        leaseOptions(10, clock, 10s, 5));
    for (int i = 0; i < 5; ++i) {
        REQUIRE(leased.tryAcquire("k").allowed);  // a lease of 10, 5 left
    }
    const std::uint64_t before = storage.stats().requests;
    server->pause();  // the renewal's call waits until the server runs again
    std::atomic<bool> renewed{false};
    Decision renewer;  // read after the join: Catch's assertions are for the test's thread
    std::thread renewing([&] {
        renewer = leased.tryAcquire("k");  // leaves 4: renews
        renewed = true;
    });
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (storage.stats().requests == before && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();  // until the renewal is sent
    }
    if (storage.stats().requests == before) {
        server->resume();
        renewing.join();
        FAIL("the request that left 4 sent no renewal");
    }
    for (int i = 0; i < 4; ++i) {
        const Decision d = leased.tryAcquire("k");
        CHECK(d.allowed);
        CHECK_FALSE(d.degraded);
    }
    CHECK_FALSE(renewed.load());  // the 4 were answered while the renewal waited
    server->resume();
    renewing.join();
    CHECK(renewer.allowed);
    CHECK(leased.peek("k", 0).remaining == 80);  // the lease and its renewal
    for (int i = 0; i < 5; ++i) {
        CHECK(leased.tryAcquire("k").allowed);  // from the renewed 10, leaving 5: no renewal
    }
    CHECK(leased.peek("k", 0).remaining == 80);
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
    // At most 15 + 4 (renewBelow) leased tokens left in each of 4 hosts.
    CHECK(admitted >= kBurst - std::int64_t{4} * (15 + 4));
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

TEST_CASE(
    "LeasedLimiter: across a refill the over-admission reaches hosts x (tokens - 1 + "
    "renewBelow), no more",
    "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr std::int64_t kTokens = 5;
    SECTION("without renewals: hosts x (tokens - 1)") {
        // Each host takes 5 and keeps 4 unspent; the bucket of 10 is then half leased.
        const RefillRace race =
            raceAcrossRefill(*server, Limit::perSecond(10).withBurst(10), kTokens, 0, 1, 1s);
        CHECK(race.exactAdmitted == 2 + 10);  // then a full bucket
        CHECK(race.admitted - race.exactAdmitted == 2 * (kTokens - 1));
    }
    SECTION("with renewals: hosts x (tokens - 1 + renewBelow)") {
        // Each host takes 5, and at 1 left renews: 6 unspent, and the bucket of 20 all leased.
        constexpr std::int64_t kRenewBelow = 2;
        const RefillRace race = raceAcrossRefill(*server, Limit::perSecond(10).withBurst(20),
                                                 kTokens, kRenewBelow, 4, 2s);
        CHECK(race.leasedBeforeRefill == 20);
        CHECK(race.exactAdmitted == 8 + 20);
        CHECK(race.admitted - race.exactAdmitted == 2 * (kTokens - 1 + kRenewBelow));
    }
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
    // its one lease held unspent: tokens − 1, and renewBelow (5 / 4 = 1) for a renewal.
    INFO("admitted " << admitted);
    REQUIRE(hosts[0].options().renewBelow == 1);
    CHECK(admitted <= 16 + 100 + 2 * (kTokens - 1 + 1));
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

TEST_CASE("LeasedLimiter: what a lease leaves unspent goes back after half its lifetime",
          "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    LeasedLimiter<Bucket> leased(
        Bucket(Limit::perHour(1).withBurst(100), storage, clock, limiterOptions("lifetime")),
        leaseOptions(10, clock, 4s));
    CHECK(leased.tryAcquire("k").allowed);
    CHECK(leased.peek("k", 0).remaining == 90);
    clock.advance(1999ms);
    CHECK(leased.tryAcquire("k").allowed);  // still from the lease
    CHECK(storeCalls(storage) == 2);        // the lease, and the peek
    clock.advance(1ms);
    CHECK(leased.tryAcquire("k").allowed);  // the 8 unspent go back, a new lease of 10
    CHECK(storeCalls(storage) == 3);        // both in one call
    CHECK(leased.peek("k", 0).remaining == 88);
    leased.returnLeases();
    CHECK(leased.peek("k", 0).remaining == 97);  // 3 requests admitted in all
}

namespace {

/// The entries of the lease ledgers under `server`: host names, each with its tokens.
std::vector<std::pair<std::string, std::int64_t>> ledgerEntries(const RedisServer& server) {
    const RedisContextPtr raw = connectTo(server);
    const RedisReplyPtr keys = command(raw.get(), {"KEYS", "*:leases{*"});
    REQUIRE(keys->type == REDIS_REPLY_ARRAY);
    std::vector<std::pair<std::string, std::int64_t>> entries;
    for (std::size_t k = 0; k < keys->elements; ++k) {
        const std::string_view key(keys->element[k]->str, keys->element[k]->len);
        CHECK(integerReply(command(raw.get(), {"PTTL", key})) > 0);
        const RedisReplyPtr all = command(raw.get(), {"HGETALL", key});
        REQUIRE(all->type == REDIS_REPLY_ARRAY);
        for (std::size_t i = 0; i + 1 < all->elements; i += 2) {
            double tokens = 0;  // the entry packs {tokens, expires} as two doubles
            REQUIRE(all->element[i + 1]->len == 2 * sizeof(double));
            std::memcpy(&tokens, all->element[i + 1]->str, sizeof tokens);
            entries.emplace_back(std::string(all->element[i]->str, all->element[i]->len),
                                 static_cast<std::int64_t>(tokens));
        }
    }
    return entries;
}

/// A host leasing 10 tokens from a bucket of 100 that refills 1 an hour, named `name`: leases
/// that live 4 s, answered from for 2 s.
std::unique_ptr<LeasedLimiter<Bucket>> ledgerHost(const RedisStorage& storage,
                                                  const ManualClock& clock,
                                                  const std::string& name) {
    return std::make_unique<LeasedLimiter<Bucket>>(
        Bucket(Limit::perHour(1).withBurst(100), storage, clock, limiterOptions(name)),
        leaseOptions(10, clock, 4s, 0));
}

}  // namespace

TEST_CASE(
    "LeasedLimiter: a host that dies holding a lease leaks it for the lease's lifetime, no more",
    "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    auto dying = ledgerHost(storage, clock, "dies");
    REQUIRE(dying->tryAcquire("k").allowed);  // spends 1 of a lease of 10
    REQUIRE(ledgerEntries(*server).size() == 1);
    REQUIRE(ledgerEntries(*server).front().second == 9);
    dying.reset();  // gone without returning its 9
    auto other = ledgerHost(storage, clock, "dies");
    clock.advance(3999ms);
    REQUIRE(other->tryAcquire("k").allowed);  // a lease of 10; the dead host's entry still lives
    CHECK(other->peek("k", 0).remaining == 80);
    CHECK(ledgerEntries(*server).size() == 2);
    clock.advance(1ms);  // a lifetime since the dead host's lease
    auto third = ledgerHost(storage, clock, "dies");
    REQUIRE(third->tryAcquire("k").allowed);  // its lease takes the dead host's 9 back
    CHECK(third->peek("k", 0).remaining == 80 + 9 - 10);
    const auto entries = ledgerEntries(*server);
    CHECK(entries.size() == 2);  // the two live hosts', 9 each
    for (const auto& [host, tokens] : entries) {
        CHECK(tokens == 9);
    }
}

TEST_CASE("LeasedLimiter: a host settles a lease that ended at its next request on any key",
          "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    auto host = ledgerHost(storage, clock, "settles");
    for (int i = 0; i < 4; ++i) {
        REQUIRE(host->tryAcquire("k").allowed);  // 4 of a lease of 10: 6 unspent
    }
    clock.advance(2s);  // half its lifetime: the lease ended
    REQUIRE(host->tryAcquire("another").allowed);
    CHECK(host->peek("k", 0).remaining == 96);    // the 6 came back before "another" leased
    REQUIRE(ledgerEntries(*server).size() == 1);  // "another"'s alone
    // Past the lease's lifetime, a lease call on "k" takes back nothing more.
    clock.advance(5s);
    auto other = ledgerHost(storage, clock, "settles");
    REQUIRE(other->tryAcquire("k").allowed);
    CHECK(other->peek("k", 0).remaining == 86);
}

TEST_CASE("LeasedLimiter: a host whose lease the store took back pays again what it spent of it",
          "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    ManualClock clock;
    auto late = ledgerHost(storage, clock, "late");
    auto other = ledgerHost(storage, clock, "late");
    for (int i = 0; i < 5; ++i) {
        REQUIRE(late->tryAcquire("k").allowed);  // 5 of a lease of 10: 5 unspent
    }
    clock.advance(4s);                        // silent for the lease's lifetime
    REQUIRE(other->tryAcquire("k").allowed);  // takes back the late host's 9, leases 10
    CHECK(other->peek("k", 0).remaining == 90 + 9 - 10);
    // The late host's next request settles its lease: of the 9 taken back, the store takes again
    // the 4 it spent, and the 5 unspent stay in the store. Then a new lease of 10.
    REQUIRE(late->tryAcquire("k").allowed);
    // 7 requests admitted, 9 leased unspent in each host: exact.
    CHECK(late->peek("k", 0).remaining == 100 - 7 - 2 * 9);
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
    o.renewBelow = 16;
    rejects(o, "LeaseOptions.renewBelow");
    o = {};
    o.renewBelow = -1;
    rejects(o, "LeaseOptions.renewBelow");
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

TEST_CASE(
    "LeasedLimiter: 8 threads in each of 4 processes admit exactly the bucket, with one "
    "store call per lease",
    "[redis][leasing][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr std::int64_t kBurst = 2000;
    constexpr std::int64_t kTokens = 16;
    constexpr std::int64_t kHeld = kTokens - 1 + kTokens / 4;  // the most a host holds unspent
    const std::string frozen = "1726000000123456";
    const Limit limit = Limit::perHour(1).withBurst(kBurst);
    ManualClock clock;
    clock.set(std::chrono::microseconds{1726000000123456});
    const RedisStorage storage(storageOptions(*server, "rl-lease"));
    Bucket store(limit, storage, clock, limiterOptions("procs"));

    // 4 × 8 × 100 = 3200 attempts on 2000 tokens at one instant: none beyond the bucket, and
    // with the workers' leases given back, every admission is one token spent in the store.
    std::int64_t admitted = 0;
    for (const WorkerFigures& f :
         leasingWorkers(*server, limit, "procs", "k", frozen, 800, kTokens)) {
        admitted += f.admitted;
    }
    CHECK(admitted <= kBurst);
    CHECK(admitted >= kBurst - 4 * kHeld);
    CHECK(store.peek("k", 0).remaining == kBurst - admitted);

    // 4 × 8 × 400 = 12800 requests, all within the bucket: a store call per 16, each taking 16
    // tokens, but for what the hosts held at the end and a lease that outlived its lifetime.
    const Limit roomy = Limit::perHour(1).withBurst(100000);
    std::int64_t within = 0;
    std::uint64_t calls = 0;
    for (const WorkerFigures& f :
         leasingWorkers(*server, roomy, "procs-calls", "k", frozen, 3200, kTokens)) {
        within += f.admitted;
        calls += f.calls;
    }
    CHECK(within == 12800);
    INFO("store calls " << calls);
    CHECK(calls >= static_cast<std::uint64_t>(12800 / kTokens));
    CHECK(calls <= static_cast<std::uint64_t>(12800 / kTokens + 12800 / kTokens / 10));
}

TEST_CASE(
    "LeasedLimiter: 8 threads in each of 4 processes on their system clocks stay within "
    "the bucket and hosts x (tokens - 1 + renewBelow)",
    "[redis][leasing][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr std::int64_t kTokens = 8;
    const Limit limit = Limit::per(200, 100ms).withBurst(50);
    std::int64_t admitted = 0;
    std::int64_t firstUs = std::numeric_limits<std::int64_t>::max();
    std::int64_t lastUs = std::numeric_limits<std::int64_t>::min();
    for (const WorkerFigures& f :
         leasingWorkers(*server, limit, "procs-system", "k", "system", 4000, kTokens)) {
        admitted += f.admitted;
        firstUs = std::min(firstUs, f.firstUs);
        lastUs = std::max(lastUs, f.lastUs);
    }
    const std::int64_t exact =
        admissionBound<ratelimit::TokenBucketModel>(limit, firstUs * 1000, lastUs * 1000);
    CAPTURE(admitted, exact, lastUs - firstUs);
    CHECK(admitted > 0);
    CHECK(admitted <= exact + 4 * (kTokens - 1 + kTokens / 4));
}

TEST_CASE("LeasedLimiter: a key's lease ledger is its state's key with :leases before the tag",
          "[redis][leasing]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage::Options options = storageOptions(*server, "rl-ledger");
    const RedisStorage storage(options);
    ManualClock clock;
    auto host = ledgerHost(storage, clock, "names");
    const std::string overBound(options.maxKeyBytes + 1, 'k');  // its tag is its digest's
    std::set<std::string> expected;
    for (const std::string& key : {std::string("user:1"), std::string(), overBound}) {
        REQUIRE(host->tryAcquire(key).allowed);  // takes a lease: writes the key's ledger
        const std::string state =
            redisKeyOf<ratelimit::TokenBucketModel>("rl-ledger", "names", key, options);
        const std::string tag = hashTagOf(key, options);
        REQUIRE(state.ends_with(tag));
        expected.insert(state.substr(0, state.size() - tag.size()) + ":leases" + tag);
    }
    const RedisContextPtr raw = connectTo(*server);
    const RedisReplyPtr keys = command(raw.get(), {"KEYS", "*:leases{*"});
    REQUIRE(keys->type == REDIS_REPLY_ARRAY);
    std::set<std::string> found;
    for (std::size_t k = 0; k < keys->elements; ++k) {
        found.emplace(keys->element[k]->str, keys->element[k]->len);
    }
    CHECK(found == expected);
}

}  // namespace ratelimit_test
