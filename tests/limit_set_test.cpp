// Tests of include/ratelimit/algorithms/limit_set.hpp over the memory storage: a limit set
// admits exactly what its strictest member admits and consumes from every member or none
// (against independent per-member limiters fed only what the set admitted), reports the binding
// member, stays exact under threads, and runs the tier table of docs/semantics.md ("Limit
// sets"). The Redis side is tests/storage/redis_limit_set_test.cpp.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ratelimit/ratelimit.hpp>

#include "support/catch.hpp"
#include "support/decision_string.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

using ratelimit::FixedWindowModel;
using ratelimit::LeakyBucketModel;
using ratelimit::LimitSet;
using ratelimit::SlidingCounterModel;
using ratelimit::SlidingLogModel;
using ratelimit::TokenBucketModel;

static_assert(std::is_same_v<LimitSet<TokenBucketModel>, TokenBucketModel>,
              "a set of one is its model, at its cost");
static_assert(sizeof(LimitSet<TokenBucketModel, FixedWindowModel>::State) ==
                  sizeof(TokenBucketModel::State) + sizeof(FixedWindowModel::State),
              "a set's state is its members' states and nothing else");

/// The sets the randomized test runs: every algorithm, 2 to 4 members, a model twice (a set of
/// one is its model, tested as such).
using RandomSets =
    std::tuple<LimitSet<TokenBucketModel, FixedWindowModel>,
               LimitSet<SlidingCounterModel, SlidingLogModel>,
               LimitSet<LeakyBucketModel, FixedWindowModel, TokenBucketModel>,
               LimitSet<FixedWindowModel, SlidingLogModel, SlidingCounterModel, TokenBucketModel>,
               LimitSet<TokenBucketModel, TokenBucketModel>>;

namespace {

/// A random member limit: 1 … 20 per second, minute, hour or day, a bucket's burst 1 … 30.
template <class Model>
Limit randomMemberLimit(Rng& rng) {
    constexpr std::array<std::chrono::nanoseconds, 4> kPeriods{1s, 1min, 1h, 24h};
    const Limit limit =
        Limit::per(uniform(rng, 1, 20), kPeriods[static_cast<std::size_t>(uniform(rng, 0, 3))]);
    return Model::kBucket ? limit.withBurst(uniform(rng, 1, 30)) : limit;
}

/// One memory limiter per member of `Set`, on one clock: the exact reference a set is held to.
template <class Set, class Is = std::make_index_sequence<Set::kSize>>
struct References;
template <class Set, std::size_t... I>
struct References<Set, std::index_sequence<I...>> {
    using Type = std::tuple<MemoryLimiter<typename Set::template Member<I>>...>;

    static Type make(const typename Set::Limits& limits, const ManualClock& clock) {
        return Type{
            MemoryLimiter<typename Set::template Member<I>>(limits[I], MemoryStorage{}, clock)...};
    }
};

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "LimitSet: admits exactly when every member alone would, consumes from all or none, and "
    "refunds each",
    "[limit_set]", RandomSets) {
    using Set = TestType;
    Rng rng(0x5e7'0f'11'1175ULL + Set::kSize);
    for (int round = 0; round < 40; ++round) {
        const auto limits = [&]<std::size_t... I>(std::index_sequence<I...>) {
            return
                typename Set::Limits{randomMemberLimit<typename Set::template Member<I>>(rng)...};
        }
        (std::make_index_sequence<Set::kSize>{});
        ManualClock clock;
        clock.set(std::chrono::nanoseconds{uniform(rng, 0, std::int64_t{1} << 50)});
        MemoryLimiter<Set> set(limits, MemoryStorage{}, clock);
        // The same set asked without its members' decisions: the step every plain call takes,
        // which binds on its own path (`LimitSetModel::stepEnforced`).
        MemoryLimiter<Set> plain(limits, MemoryStorage{}, clock);
        auto references = References<Set>::make(limits, clock);
        const std::int64_t capacity = Set::capacity(limits);
        for (int step = 0; step < 300; ++step) {
            clock.advance(randomForwardStep(
                rng, limits[static_cast<std::size_t>(uniform(rng, 0, Set::kSize - 1))]));
            const std::int64_t cost = randomCost(rng, capacity);
            if (uniform(rng, 0, 9) == 0) {
                // A refund: every member gives back as it would alone.
                typename Set::Decisions each;
                const Decision d = set.refund("key", cost, each);
                INFO("round " << round << " step " << step << " refund " << cost);
                REQUIRE(d.allowed);
                REQUIRE(plain.refund("key", cost) == d);
                Set::forEach([&]<std::size_t I>() {
                    REQUIRE(describe(each[I]) ==
                            describe(std::get<I>(references).refund("key", cost)));
                });
                continue;
            }
            typename Set::Decisions alone;
            bool all = true;
            Set::forEach([&]<std::size_t I>() {
                alone[I] = std::get<I>(references).peek("key", cost);
                all = all && alone[I].allowed;
            });
            typename Set::Decisions each;
            const Decision d = set.tryAcquire("key", cost, each);
            INFO("round " << round << " step " << step << " cost " << cost << ": " << describe(d));
            REQUIRE(d.allowed == all);
            REQUIRE(plain.tryAcquire("key", cost) == d);
            Set::forEach([&]<std::size_t I>() {
                INFO("member " << I);
                if (all) {
                    // Each member consumed the cost, as it would alone.
                    REQUIRE(describe(each[I]) ==
                            describe(std::get<I>(references).tryAcquire("key", cost)));
                } else if (!alone[I].allowed) {
                    REQUIRE(describe(each[I]) == describe(alone[I]));
                } else {
                    // It would have admitted: nothing consumed, its figures as they stand.
                    REQUIRE(describe(each[I]) == describe(std::get<I>(references).peek("key", 0)));
                }
            });
            // The binding member: the longest wait when refused, the least left when admitted.
            REQUIRE(d.policy < Set::kSize);
            const Decision& binding = each[d.policy];
            for (const Decision& m : each) {
                if (all) {
                    REQUIRE(binding.remaining <= m.remaining);
                } else if (!m.allowed) {
                    REQUIRE(binding.retryAfter >= m.retryAfter);
                }
            }
            REQUIRE(d.remaining == binding.remaining);
            REQUIRE(d.retryAfter == binding.retryAfter);
            REQUIRE(d.resetAfter == binding.resetAfter);
            REQUIRE(d.limit == binding.limit);
            // Every field is the binding member's, and it is the first of the tightest.
            Decision expected = binding;
            expected.policy = d.policy;
            REQUIRE(d == expected);
            for (std::size_t j = 0; j < Set::kSize; ++j) {
                if (j < d.policy) {
                    REQUIRE(ratelimit::detail::bindsTighter(binding, each[j]));
                } else if (j > d.policy) {
                    REQUIRE_FALSE(ratelimit::detail::bindsTighter(each[j], binding));
                }
            }
            REQUIRE(describe(set.peek("key", 0)) == describe(set.peek("key", 0)));
        }
    }
}

TEST_CASE("LimitSet: a refusal by the day's limit spends nothing of the second's", "[limit_set]") {
    // The chained limiters of a new user: 3 per second and 10 per day, the day checked first.
    // Chained, the second limiter's refusals spent the day's 10 in the first seconds; as one
    // set, the day's 10 are served.
    using Set = LimitSet<FixedWindowModel, TokenBucketModel>;
    ManualClock clock;
    MemoryLimiter<Set> limiter({Limit::perDay(10), Limit::perSecond(3)}, MemoryStorage{}, clock);
    int served = 0;
    for (int second = 0; second < 86'400; ++second) {
        for (int i = 0; i < 5; ++i) {
            served += limiter.tryAcquire("new user").allowed ? 1 : 0;
        }
        clock.advance(1s);
    }
    CHECK(served == 10);
}

TEST_CASE("LimitSet: the decision names the binding member", "[limit_set]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    ManualClock clock;
    MemoryLimiter<Set> limiter({Limit::perMinute(30).withBurst(10), Limit::perDay(12)},
                               MemoryStorage{}, clock);
    Set::Decisions each;
    Decision d = limiter.tryAcquire("k", 4, each);
    CHECK(d.allowed);
    CHECK(d.policy == 0);  // 6 left of the burst, 8 of the day
    CHECK(d.remaining == 6);
    CHECK(each[0].remaining == 6);
    CHECK(each[1].remaining == 8);
    CHECK(each[1].limit == 12);

    d = limiter.tryAcquire("k", 6, each);
    CHECK(d.allowed);
    CHECK(d.remaining == 0);
    CHECK(d.policy == 0);  // 0 of the burst and 2 of the day

    clock.advance(1min);  // the burst is full again; the day has 2 left
    d = limiter.tryAcquire("k", 3, each);
    CHECK_FALSE(d.allowed);
    CHECK(d.policy == 1);
    CHECK(each[0].allowed);  // the bucket would have admitted: its figures untouched
    CHECK(each[0].remaining == 10);
    CHECK_FALSE(each[1].allowed);
    CHECK(d.retryAfter == each[1].retryAfter);
    CHECK(d.retryAfter == 24h - 1min);
    CHECK(limiter.peek("k", 0, each).remaining == 2);

    d = limiter.tryAcquire("k", 11);  // above the smallest capacity: never
    CHECK(d.never());
    CHECK(d.policy == 0);
}

TEST_CASE("LimitSet: with time frozen, 8 threads on one key admit exactly the binding limit",
          "[limit_set][concurrency]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    const std::array<std::pair<Set::Limits, std::int64_t>, 2> cases{{
        {{Limit::perMinute(40).withBurst(27), Limit::perDay(19)}, 19},
        {{Limit::perMinute(40).withBurst(12), Limit::perDay(50)}, 12},
    }};
    for (const auto& [limits, expected] : cases) {
        ManualClock clock;
        clock.set(1h);
        MemoryLimiter<Set> limiter(limits, MemoryStorage{}, clock);
        CHECK(admittedFromThreads(8, 20, [&] { return limiter.tryAcquire("hot").allowed; }) ==
              expected);
        Set::Decisions each;
        (void)limiter.peek("hot", 0, each);
        CHECK(each[0].remaining == limits[0].burst - expected);
        CHECK(each[1].remaining == limits[1].count - expected);
    }
}

/// The tier table of docs/semantics.md: a minute's bucket and a day's window per tier.
struct Tier {
    const char* name = "";
    Limit minute;
    Limit day;
};
constexpr std::array<Tier, 3> kTiers{{
    {"free", Limit::perMinute(30).withBurst(10), Limit::perDay(1'000)},
    {"pro", Limit::perMinute(300).withBurst(50), Limit::perDay(50'000)},
    {"enterprise", Limit::perMinute(3'000).withBurst(200), Limit::perDay(500'000)},
}};

TEST_CASE("LimitSet: the tier table, a burst and then a steady client through the day",
          "[limit_set]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    for (const Tier& tier : kTiers) {
        INFO(tier.name);
        ManualClock clock;
        MemoryLimiter<Set> limiter({tier.minute, tier.day}, MemoryStorage{}, clock);
        // A burst: the bucket's burst is served at once.
        const auto [burst, last] =
            send(limiter, static_cast<int>(tier.minute.burst + 5), "api key");
        CHECK(burst == tier.minute.burst);
        CHECK(last.policy == 0);
        // Then exactly the sustained rate, all day: served until the day's count is spent.
        const auto interval = tier.minute.period / tier.minute.count;
        std::int64_t served = burst;
        Decision d;
        for (auto t = interval; t < 24h; t += interval) {
            clock.set(t);
            d = limiter.tryAcquire("api key");
            served += d.allowed ? 1 : 0;
        }
        CHECK(served == tier.day.count);
        CHECK_FALSE(d.allowed);
        CHECK(d.policy == 1);
        CHECK(d.retryAfter == interval);  // the day's window ends at the next request's time
    }
}

TEST_CASE("LimitSet: configuration errors are refused at construction", "[limit_set]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    ManualClock clock;
    LimiterOptions spread;
    spread.spreadWindowResets = true;
    CHECK_THROWS_WITH(
        MemoryLimiter<Set>({Limit::perMinute(1), Limit::perDay(2)}, MemoryStorage{}, clock, spread),
        Catch::Matchers::Contains("spreadWindowResets"));
    CHECK_THROWS_WITH(
        MemoryLimiter<Set>({Limit::perMinute(1), Limit::perDay(0)}, MemoryStorage{}, clock),
        Catch::Matchers::Contains("count"));
    // Two sets of one name share keys only with the same limits.
    const MemoryStorage storage;
    const MemoryLimiter<Set> first({Limit::perMinute(1), Limit::perDay(2)}, storage, clock);
    CHECK_THROWS_WITH(MemoryLimiter<Set>({Limit::perMinute(1), Limit::perDay(3)}, storage, clock),
                      Catch::Matchers::Contains("another limit"));
    CHECK_NOTHROW(MemoryLimiter<Set>({Limit::perMinute(1), Limit::perDay(2)}, storage, clock));
}

TEST_CASE("LimitSet: dry-run admits what the set refuses and reports the refusal", "[limit_set]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    ManualClock clock;
    LimiterOptions options;
    options.dryRun = true;
    MemoryLimiter<Set> shadow({Limit::perMinute(30).withBurst(10), Limit::perDay(12)},
                              MemoryStorage{}, clock, options);
    MemoryLimiter<Set> enforcing({Limit::perMinute(30).withBurst(10), Limit::perDay(12)},
                                 MemoryStorage{}, clock);
    for (int i = 0; i < 15; ++i) {
        const Decision s = shadow.tryAcquire("k");
        const Decision e = enforcing.tryAcquire("k");
        CHECK(s.allowed);
        CHECK(s.wouldRefuse == !e.allowed);
        CHECK(s.policy == e.policy);
        CHECK(s.remaining == e.remaining);
    }
    CHECK(shadow.dryRunRefusals() == 5);
    Set::Decisions each;
    const Decision d = shadow.tryAcquire("k", 1, each);
    CHECK(d.allowed);
    CHECK(d.wouldRefuse);
    CHECK(each[0].allowed);  // the bucket has refilled nothing: it is the one that refuses
    CHECK(each[0].wouldRefuse);
    CHECK(each[1].allowed);  // 2 of the day's 12 are left
    CHECK_FALSE(each[1].wouldRefuse);
    CHECK(each[1].remaining == 2);
}

TEST_CASE("LimitSet: a member in dry-run reports its refusals but never refuses the set",
          "[limit_set]") {
    // A new daily cap of 12 watched beside the enforced bucket: the set decides as the bucket
    // alone, and the day's refusals are reported and counted.
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    ManualClock clock;
    LimiterOptions options;
    options.dryRunMembers = 0b10;
    MemoryLimiter<Set> watched({Limit::perMinute(30).withBurst(10), Limit::perDay(12)},
                               MemoryStorage{}, clock, options);
    // Asked without the members' decisions, the set takes its dry-run path all the same.
    MemoryLimiter<Set> plain({Limit::perMinute(30).withBurst(10), Limit::perDay(12)},
                             MemoryStorage{}, clock, options);
    MemoryLimiter<TokenBucketModel> bucket(Limit::perMinute(30).withBurst(10), MemoryStorage{},
                                           clock);
    MemoryLimiter<FixedWindowModel> day(Limit::perDay(12), MemoryStorage{}, clock);
    std::int64_t dayWouldRefuse = 0;
    for (int i = 0; i < 60; ++i) {
        clock.set(std::chrono::seconds{i});
        Set::Decisions each;
        const Decision w = watched.tryAcquire("k", 1, each);
        const Decision b = bucket.tryAcquire("k");
        INFO("call " << i << ": " << describe(w));
        REQUIRE(plain.tryAcquire("k") == w);
        REQUIRE(w.allowed == b.allowed);
        REQUIRE(w.policy == 0);  // the enforced member binds, always
        REQUIRE(w.remaining == b.remaining);
        // The day's member as it would decide alone, fed only what the set admitted.
        const Decision d = w.allowed ? day.tryAcquire("k") : day.peek("k");
        REQUIRE(each[1].allowed);
        REQUIRE(each[1].wouldRefuse == !d.allowed);
        REQUIRE(each[1].remaining == d.remaining);
        REQUIRE(w.wouldRefuse == (w.allowed && !d.allowed));
        dayWouldRefuse += w.wouldRefuse ? 1 : 0;
    }
    CHECK(dayWouldRefuse > 0);
    CHECK(watched.dryRunRefusals() == static_cast<std::uint64_t>(dayWouldRefuse));
    // Some member stays enforced, and only a set has members.
    LimiterOptions all;
    all.dryRunMembers = 0b11;
    CHECK_THROWS_WITH(
        MemoryLimiter<Set>({Limit::perMinute(1), Limit::perDay(1)}, MemoryStorage{}, clock, all),
        Catch::Matchers::Contains("LimiterOptions.dryRunMembers"));
    LimiterOptions beyond;
    beyond.dryRunMembers = 0b100;
    CHECK_THROWS_WITH(
        MemoryLimiter<Set>({Limit::perMinute(1), Limit::perDay(1)}, MemoryStorage{}, clock, beyond),
        Catch::Matchers::Contains("LimiterOptions.dryRunMembers"));
    LimiterOptions single;
    single.dryRunMembers = 1;
    CHECK_THROWS_WITH(
        MemoryLimiter<TokenBucketModel>(Limit::perMinute(1), MemoryStorage{}, clock, single),
        Catch::Matchers::Contains("LimiterOptions.dryRunMembers"));
}

TEST_CASE("LimitSet: the response fields list every member, and the binding one's legacy fields",
          "[limit_set][http]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    ManualClock clock;
    MemoryLimiter<Set> limiter({Limit::perMinute(30).withBurst(10), Limit::perDay(12)},
                               MemoryStorage{}, clock);
    const auto policies =
        ratelimit::http::QuotaPolicy::forLimitSet({"per-minute", "per-day"}, limiter);
    CHECK(policies[0].quota == 10);
    CHECK(policies[0].window == 20s);  // the burst refills in 20 s at 30 per minute
    CHECK(policies[1].quota == 12);
    CHECK(policies[1].window == 24h);
    const ratelimit::http::RateLimitHeaders headers(
        {.legacyReset = ratelimit::http::HeaderOptions::Reset::kDeltaSeconds});
    const auto field = [](const std::vector<ratelimit::http::Header>& fields,
                          std::string_view name) {
        for (const auto& f : fields) {
            if (f.name == name) {
                return f.value;
            }
        }
        return std::string("(none)");
    };
    Set::Decisions each;
    (void)limiter.tryAcquire("k", 9, each);
    auto fields = headers(policies, each);
    CHECK(field(fields, "RateLimit-Policy") ==
          "\"per-minute\";q=10;w=20, \"per-day\";q=12;w=86400");
    CHECK(field(fields, "RateLimit") == "\"per-minute\";r=1;t=18, \"per-day\";r=3;t=86400");
    CHECK(field(fields, "X-RateLimit-Limit") == "10");  // the minute's: 1 left
    CHECK(field(fields, "X-RateLimit-Remaining") == "1");

    clock.advance(1min);
    (void)limiter.tryAcquire("k", 5, each);  // the day has 3 left: refused, the bucket untouched
    fields = headers(policies, each);
    CHECK(field(fields, "RateLimit") == "\"per-minute\";r=10;t=0, \"per-day\";r=3;t=86340");
    CHECK(field(fields, "X-RateLimit-Limit") == "12");
    CHECK(field(fields, "Retry-After") == "86340");
}

}  // namespace ratelimit_test
