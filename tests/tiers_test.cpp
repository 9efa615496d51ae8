// Tests of tiers resolved per key over the memory storage (include/ratelimit/tiers.hpp,
// include/ratelimit/algorithms/tiered.hpp): the canonical tier table as scenarios (a free key
// sends 15 at once and gets 10, then one every 2 s all day and stops at 1,000); a key whose
// tier changes keeps its consumption, carried over toward fewer admissions (never more than
// the stricter of the two tiers leaves it), in random runs; tiers are registered and checked up
// front; 8 threads on one key admit exactly its tier's burst. The Redis side is in
// tests/storage/redis_policies_test.cpp.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <ratelimit/ratelimit.hpp>

#include "support/catch.hpp"
#include "support/decision_string.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

using ratelimit::FixedWindowModel;
using ratelimit::LimitSet;
using ratelimit::TieredLimiter;
using ratelimit::TokenBucketModel;

namespace {

using PlanSet = LimitSet<TokenBucketModel, FixedWindowModel>;
using Plans = TieredLimiter<PlanSet, MemoryStorage, ManualClock>;

/// The tier table: free: 30/min burst 10 and 1,000/day; pro: 300/min burst 50 and 50,000/day;
/// enterprise: 3,000/min burst 200 and 500,000/day.
std::vector<Plans::Tier> tierTable() {
    return {{"free", {Limit::perMinute(30).withBurst(10), Limit::perDay(1000)}},
            {"pro", {Limit::perMinute(300).withBurst(50), Limit::perDay(50000)}},
            {"enterprise", {Limit::perMinute(3000).withBurst(200), Limit::perDay(500000)}}};
}

}  // namespace

TEST_CASE("Tiers: a free key sends 15 at once and gets 10, then one per 2 s stops at 1,000",
          "[tiers]") {
    ManualClock clock;
    Plans plans(tierTable(), MemoryStorage{}, clock);
    const Plans::TierId free = plans.tier("free");
    std::int64_t admitted = 0;
    for (int i = 0; i < 15; ++i) {
        admitted += plans.tryAcquire("api-key-1", free).allowed ? 1 : 0;
    }
    CHECK(admitted == 10);
    PlanSet::Decisions each;
    Decision last;
    for (int second = 2; second < 24 * 3600; second += 2) {
        clock.set(std::chrono::seconds{second});
        last = plans.tryAcquire("api-key-1", free, 1, each);
        if (!last.allowed) {
            break;
        }
        ++admitted;
    }
    CHECK(admitted == 1000);
    CHECK(!last.allowed);
    CHECK(last.policy == 1);  // the day's member binds
    CHECK(each[0].allowed);   // the minute's would have admitted
    // Another tier's key is its own.
    const Decision pro = plans.tryAcquire("api-key-2", plans.tier("pro"));
    CHECK(pro.allowed);
    CHECK(pro.remaining == 49);
}

TEST_CASE("Tiers: an upgrade or a downgrade never admits more than the stricter tier leaves",
          "[tiers][limit_change]") {
    ManualClock clock;
    Plans plans(tierTable(), MemoryStorage{}, clock);
    const Plans::TierId free = plans.tier("free");
    const Plans::TierId pro = plans.tier("pro");
    // Free, 6 of the burst of 10 spent; then pro: 6 consumed of 50, plus the 40 pro adds.
    for (int i = 0; i < 6; ++i) {
        REQUIRE(plans.tryAcquire("k", free).allowed);
    }
    PlanSet::Decisions each;
    CHECK(plans.peek("k", pro, 0, each).remaining == leftAfterChange(10, 4, 50));
    CHECK(plans.tryAcquire("k", pro, 1, each).remaining == 3);
    // The day's member carried over as strictly: no more today than free's 1,000 leave.
    CHECK(each[1].remaining == 1000 - 7);
    // A heavy pro key moved down to free has nothing left of its burst.
    for (int i = 0; i < 40; ++i) {
        REQUIRE(plans.tryAcquire("heavy", pro).allowed);
    }
    const Decision down = plans.tryAcquire("heavy", free);
    CHECK(!down.allowed);
    CHECK(down.retryAfter == 2s);  // a token every 2 s at free's rate
}

TEST_CASE("Tiers: random switches carry each key over as a change of limit does",
          "[tiers][limit_change]") {
    using Single = TieredLimiter<TokenBucketModel, MemoryStorage, ManualClock>;
    Rng rng(20261203);
    for (int round = 0; round < 40; ++round) {
        std::vector<Single::Tier> tiers;
        const int count = static_cast<int>(uniform(rng, 2, 4));
        tiers.reserve(static_cast<std::size_t>(count));
        for (int t = 0; t < count; ++t) {
            tiers.push_back({"t" + std::to_string(t),
                             Limit::perMinute(uniform(rng, 1, 20)).withBurst(uniform(rng, 1, 30))});
        }
        ManualClock clock;
        Single limiter(tiers, MemoryStorage{}, clock);
        Single::TierId tier = 0;
        std::int64_t left = tiers[0].limit.burst;
        for (int step = 0; step < 200; ++step) {
            INFO("round " << round << " step " << step);
            clock.advance(std::chrono::milliseconds{uniform(rng, 0, 3000)});
            const auto next = static_cast<Single::TierId>(uniform(rng, 0, count - 1));
            // What the key has left now, under its own tier.
            left = limiter.peek("k", tier, 0).remaining;
            const Decision seen = limiter.peek("k", next, 0);
            const std::int64_t expected =
                next == tier
                    ? left
                    : leftAfterChange(tiers[tier].limit.burst, left, tiers[next].limit.burst);
            REQUIRE(seen.remaining == expected);
            REQUIRE(seen.limit == tiers[next].limit.burst);
            const std::int64_t cost = uniform(rng, 1, 3);
            const Decision d = limiter.tryAcquire("k", next, cost);
            REQUIRE(d.allowed == (cost <= expected));
            tier = next;
        }
    }
}

TEST_CASE("Tiers: 8 threads on one key admit exactly its tier's burst", "[tiers]") {
    ManualClock clock;
    Plans plans(tierTable(), MemoryStorage{}, clock);
    const Plans::TierId enterprise = plans.tier("enterprise");
    CHECK(admittedFromThreads(8, 100,
                              [&] { return plans.tryAcquire("hot", enterprise).allowed; }) == 200);
}

TEST_CASE("Tiers: registered and checked up front; setLimit changes one tier", "[tiers][config]") {
    CHECK_THROWS_WITH(Plans({}), Catch::Matchers::Contains("tiers must number"));
    CHECK_THROWS_WITH(Plans({{"", {Limit::perMinute(1), Limit::perDay(1)}}}),
                      Catch::Matchers::Contains("Tier.name"));
    CHECK_THROWS_WITH(Plans({{"a", {Limit::perMinute(1), Limit::perDay(1)}},
                             {"a", {Limit::perMinute(2), Limit::perDay(2)}}}),
                      Catch::Matchers::Contains("given twice"));
    ManualClock clock;
    Plans plans(tierTable(), MemoryStorage{}, clock);
    CHECK_THROWS_WITH(plans.tier("gold"), Catch::Matchers::Contains("no tier named \"gold\""));
    CHECK(!plans.findTier("gold"));
    CHECK(plans.tierCount() == 3);
    CHECK(plans.tierName(2) == "enterprise");
    CHECK_THROWS_WITH(plans.tryAcquire("k", 3), Catch::Matchers::Contains("tier id 3"));
    const Plans::TierId free = plans.tier("free");
    REQUIRE(plans.tryAcquire("k", free).remaining == 9);
    plans.setLimit(free, {Limit::perMinute(60).withBurst(20), Limit::perDay(1000)});
    CHECK(plans.limit(free)[0].burst == 20);
    // 1 consumed of 10, plus the 10 the new burst adds: 9 left of 20.
    CHECK(plans.peek("k", free, 0).remaining == 9);
    CHECK(plans.limit(plans.tier("pro"))[0].burst == 50);
    plans.reset("k");
    CHECK(plans.peek("k", free, 0).remaining == 20);
}

}  // namespace ratelimit_test
