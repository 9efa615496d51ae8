// Tests of include/ratelimit/storage/redis.hpp: keys and their lifetimes. Any byte string is a
// key, stored under exactly the documented Redis key and nothing else ("keys are data" in
// docs/semantics.md), and every key carries a TTL no longer than its reset. Each test starts its
// own redis-server.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

TEMPLATE_TEST_CASE("RedisStorage: any byte string is a key, stored as given",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const std::string prefix = "rl-keys";
    const std::string name = "hostile";
    const RedisStorage storage(storageOptions(*server, prefix));
    ManualClock clock;
    clock.set(5s);
    RedisLimiter<TestType> limiter(Limit::perMinute(3), storage, clock, limiterOptions(name));
    const RedisContextPtr raw = connectTo(*server);

    std::string big;
    while (big.size() < std::size_t{64} * 1024) {
        big.push_back(static_cast<char>(big.size() % 251));
    }
    const std::vector<std::string> keys = {
        "with spaces in it",
        "cr\r\nlf",
        "\r\n",
        "*1\r\n$4\r\nPING\r\n",  // a RESP command, should it ever be sent raw
        std::string("nul\0byte", 8),
        std::string("\0", 1),
        std::string("\0\0{\0}", 5),
        "{",
        "}",
        "{}",
        "a{b}c",
        "1:a}",  // looks like the length prefix
        "%s%n%d",
        "",
        big,
    };
    // Each key, the same key with one byte changed (or, for "", one byte added), and a
    // normal key right after: all distinct.
    std::set<std::string> all;
    std::vector<std::string> twins;
    for (const std::string& k : keys) {
        std::string twin = k.empty() ? std::string("\x7f") : k;
        if (!k.empty()) {
            twin[twin.size() / 2] = static_cast<char>(twin[twin.size() / 2] ^ 0x40);
        }
        twins.push_back(twin);
        all.insert(k);
        all.insert(twin);
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
        all.insert("plain-" + std::to_string(i));
    }
    REQUIRE(all.size() == 3 * keys.size());

    for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::string& k = keys[i];
        INFO("key #" << i << " (" << k.size() << " bytes)");
        Decision d = limiter.tryAcquire(k, 2);
        CHECK(d.allowed);
        CHECK(d.remaining == 1);
        d = limiter.tryAcquire(k, 1);
        CHECK(d.allowed);
        CHECK(d.remaining == 0);
        d = limiter.tryAcquire(k, 1);
        CHECK_FALSE(d.allowed);
        CHECK(d.retryAfter > 0ns);
        CHECK(limiter.tryAcquire(k, 4).never());
        // Its twin is another key, untouched so far.
        d = limiter.tryAcquire(twins[i], 1);
        CHECK(d.allowed);
        CHECK(d.remaining == 2);
        // No protocol desync: a normal key right after gets a normal answer.
        d = limiter.tryAcquire("plain-" + std::to_string(i), 1);
        CHECK(d.allowed);
        CHECK(d.remaining == 2);
        CHECK_FALSE(d.degraded);
        // And the first key still holds its state.
        CHECK(limiter.peek(k, 0).remaining == 0);
        // Stored under exactly <prefix>:<name>:<model>:v<N>{<len>:<key>}, with a TTL.
        const std::string stored = redisKeyOf<TestType>(prefix, name, k);
        CHECK(integerReply(command(raw.get(), {"EXISTS", stored})) == 1);
        CHECK(integerReply(command(raw.get(),
                                   {"EXISTS", redisKeyOf<TestType>(prefix, name, twins[i])})) == 1);
        CHECK(integerReply(command(raw.get(), {"PTTL", stored})) > 0);
    }
    // Nothing else was written: exactly one Redis key per key used.
    std::set<std::string> expected;
    for (const std::string& k : all) {
        expected.insert(redisKeyOf<TestType>(prefix, name, k));
    }
    const std::vector<std::string> found = scanAll(raw.get());
    CHECK(std::set<std::string>(found.begin(), found.end()) == expected);
    CHECK(found.size() == expected.size());
    // reset(key) deletes exactly that key.
    limiter.reset(keys[4]);
    CHECK(integerReply(
              command(raw.get(), {"EXISTS", redisKeyOf<TestType>(prefix, name, keys[4])})) == 0);
    CHECK(integerReply(
              command(raw.get(), {"EXISTS", redisKeyOf<TestType>(prefix, name, twins[4])})) == 1);
    CHECK(limiter.tryAcquire(keys[4], 3).allowed);
    CHECK(storage.stats().failures == 0);
}

TEST_CASE("RedisStorage: a key longer than maxKeyBytes goes to Redis as its keyed digest",
          "[redis_storage][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    using Model = ratelimit::TokenBucketModel;
    using Set = ratelimit::LimitSet<ratelimit::TokenBucketModel, ratelimit::FixedWindowModel>;
    const std::string prefix = "rl-long";
    const RedisStorage::Options options = storageOptions(*server, prefix);
    REQUIRE(options.maxKeyBytes == 128);
    const RedisStorage storage(options);
    ManualClock clock;
    clock.set(5s);
    RedisLimiter<Model> limiter(Limit::perMinute(2), storage, clock, limiterOptions("long"));
    const RedisContextPtr raw = connectTo(*server);

    const std::string atBound(128, 'k');
    const std::string overBound(129, 'k');
    std::string huge(std::size_t{1} << 20, 'h');
    std::string hugeTwin = huge;
    hugeTwin.back() = 'H';  // differs in its last byte only
    const std::vector<const std::string*> keys{&atBound, &overBound, &huge, &hugeTwin};
    for (const std::string* key : keys) {
        INFO(key->size() << " bytes");
        CHECK(limiter.tryAcquire(*key, 2).allowed);
        CHECK_FALSE(limiter.tryAcquire(*key, 1).allowed);
    }
    // 128 bytes go as they are; longer keys as `{#<32 hex digits>}`.
    CHECK(hashTagOf(atBound) == "{128:" + atBound + "}");
    CHECK(hashTagOf(overBound).size() == 35);
    std::set<std::string> expected;
    for (const std::string* key : keys) {
        expected.insert(redisKeyOf<Model>(prefix, "long", *key));
    }
    const std::vector<std::string> found = scanAll(raw.get());
    CHECK(std::set<std::string>(found.begin(), found.end()) == expected);
    for (const std::string& k : found) {
        CHECK(k.size() < 200);
    }

    // Another host with the same digest key counts a long key with this one; a storage with
    // another digest key counts it apart.
    const RedisStorage sameKey(options);
    RedisLimiter<Model> otherHost(Limit::perMinute(2), sameKey, clock, limiterOptions("long"));
    CHECK_FALSE(otherHost.tryAcquire(huge, 1).allowed);
    RedisStorage::Options secret = options;
    secret.keyDigestKey = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    const RedisStorage otherKey(secret);
    RedisLimiter<Model> apart(Limit::perMinute(2), otherKey, clock, limiterOptions("long"));
    CHECK(apart.tryAcquire(huge, 2).allowed);
    CHECK(integerReply(command(raw.get(),
                               {"EXISTS", redisKeyOf<Model>(prefix, "long", huge, secret)})) == 1);
    // reset(key) deletes the digest's key.
    limiter.reset(overBound);
    CHECK(integerReply(
              command(raw.get(), {"EXISTS", redisKeyOf<Model>(prefix, "long", overBound)})) == 0);

    // A limit set's members share the digest's hash tag; maxKeyBytes 0 digests every key but
    // the empty one.
    RedisStorage::Options all = options;
    all.maxKeyBytes = 0;
    const RedisStorage digestAll(all);
    RedisLimiter<Set> set(Set::Limits{Limit::perMinute(2), Limit::perMinute(3)}, digestAll, clock,
                          limiterOptions("set"));
    CHECK(set.tryAcquire("a", 1).allowed);
    CHECK(set.tryAcquire("", 1).allowed);
    const std::string tag = hashTagOf("a", all);
    CHECK(tag.size() == 35);
    CHECK(hashTagOf("", all) == "{0:}");
    std::size_t tagged = 0;
    for (const std::string& k : scanAll(raw.get())) {
        const bool digested =
            k.size() > tag.size() && k.ends_with(tag) && k.starts_with(prefix + ":set:");
        tagged += digested ? 1 : 0;
    }
    CHECK(tagged == 2);
    CHECK(storage.stats().failures == 0);
}

TEMPLATE_TEST_CASE("RedisStorage: every key has a TTL no longer than its reset",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const bool spread = GENERATE(false, true);
    INFO("spreadWindowResets " << spread);
    const std::string prefix = "rl-ttl";
    const RedisStorage storage(storageOptions(*server, prefix));
    LimiterOptions options = limiterOptions("hygiene");
    options.spreadWindowResets = spread;
    // Server time (the default clock): times are real, so TTLs and resets count alike.
    ratelimit::Limiter<TestType, RedisStorage> limiter(Limit::perSecond(4).withBurst(6), storage,
                                                       {}, options);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(limiter.clock())>,
                                 ratelimit::RedisServerClock>);
    const std::int64_t lim = capacityOf<TestType>(Limit::perSecond(4).withBurst(6));
    const RedisContextPtr raw = connectTo(*server);
    Rng rng(testSeed() ^ std::hash<std::string_view>{}(TestType::kName) ^ (spread ? 1U : 0U));

    const std::vector<std::string> keys = {"k0", "k1", "k2", std::string("\r\n{\0}", 5), ""};
    struct Written {
        std::chrono::nanoseconds reset{};             // resetAfter of the last write
        std::chrono::steady_clock::time_point start;  // when that call started
    };
    std::map<std::string, Written> written;  // Redis key -> last write
    int writes = 0;
    int checked = 0;
    for (int step = 0; step < 200; ++step) {
        const std::string& key = keys[static_cast<std::size_t>(uniform(rng, 0, 4))];
        const std::string redisKey = redisKeyOf<TestType>(prefix, "hygiene", key);
        const std::int64_t cost =
            uniform(rng, 0, 9) < 7 ? uniform(rng, 1, 2) : uniform(rng, 0, lim + 1);
        const std::int64_t action = uniform(rng, 0, 99);
        const auto started = std::chrono::steady_clock::now();
        std::ostringstream context;
        context << "step " << step << ", key of " << key.size() << " bytes, cost " << cost;
        if (action < 4) {
            limiter.reset(key);
            written.erase(redisKey);
            context << ", reset";
        } else if (action < 20) {
            const Decision d = limiter.peek(key, cost);
            REQUIRE_FALSE(d.degraded);
            context << ", peek " << describe(d);
        } else {
            const Decision d = limiter.tryAcquire(key, cost);
            REQUIRE_FALSE(d.degraded);
            context << ", tryAcquire " << describe(d);
            if (d.allowed && cost > 0) {
                written[redisKey] = {d.resetAfter, started};
                ++writes;
            }
        }
        INFO(context.str());
        // Every key in the database has a TTL, and none longer than the last write's
        // resetAfter plus the late-call tolerance, rounded up to 1 ms, plus 1 ms.
        const std::vector<std::string> found = scanAll(raw.get());
        for (const std::string& k : found) {
            appendCommand(raw.get(), {"PTTL", k});
        }
        std::set<std::string> present;
        for (const std::string& k : found) {
            const RedisReplyPtr r = reply(raw.get());
            const std::int64_t pttl = integerReply(r);
            const auto w = written.find(k);
            if (w == written.end()) {
                FAIL("a key the test never wrote (or reset): " << k.size() << " bytes, PTTL "
                                                               << pttl);
            }
            if (pttl == -1) {
                FAIL("a key without TTL");
            }
            if (pttl == -2) {
                continue;  // expired between SCAN and PTTL
            }
            present.insert(k);
            const std::int64_t elapsedMs = std::chrono::ceil<std::chrono::milliseconds>(
                                               std::chrono::steady_clock::now() - w->second.start)
                                               .count();
            const std::int64_t ttl = ceilMs(w->second.reset + options.lateCallTolerance) + 1;
            CHECK(pttl >= 0);  // 0: less than 1 ms left, about to expire
            CHECK(pttl <= ttl);
            CHECK(pttl >= ttl - elapsedMs - 2);  // and not shorter than the reset
            ++checked;
        }
        // A key whose reset is still well ahead has not gone.
        for (const auto& [k, w] : written) {
            const auto sinceMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - w.start);
            if (sinceMs + 3ms < w.reset) {
                CHECK(present.count(k) == 1);
            }
        }
    }
    CHECK(writes > 15);
    CHECK(checked > 100);
    CHECK(storage.stats().failures == 0);
}

}  // namespace ratelimit_test
