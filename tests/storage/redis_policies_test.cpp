// Tests of the policies beyond one limit over include/ratelimit/storage/redis.hpp: limit sets
// (include/ratelimit/algorithms/limit_set.hpp), where one script call steps every member, each
// in its own key under the key's one hash tag, and refunds (`Limiter::refund`). Both decide as
// the memory storage does, member by member (randomized differential runs, clock steps back
// included); the failure policies answer for every member; a dry-run limiter's strikes and
// refunds on a blocked key are admitted and marked. The multi-process exactness test of
// a set is in tests/storage/redis_concurrency_test.cpp. Each test starts its own redis-server
// (tests/support/redis_server.hpp).

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/decision_string.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

using ratelimit::FixedWindowModel;
using ratelimit::LeakyBucketModel;
using ratelimit::LimitSet;
using ratelimit::SlidingCounterModel;
using ratelimit::SlidingLogModel;
using ratelimit::TokenBucketModel;

/// Every algorithm in a set, 2 to 4 members, a model twice.
using RedisSets =
    std::tuple<LimitSet<TokenBucketModel, FixedWindowModel>,
               LimitSet<SlidingLogModel, SlidingCounterModel, LeakyBucketModel>,
               LimitSet<FixedWindowModel, SlidingLogModel, TokenBucketModel, TokenBucketModel>>;

namespace {

/// A random member limit in whole microseconds: 1 … 12 per 10 ms … 1 day, a bucket's burst
/// 1 … 15.
template <class Model>
Limit randomMemberLimit(Rng& rng) {
    constexpr std::array<std::chrono::nanoseconds, 4> kPeriods{10ms, 1s, 1min, 24h};
    const Limit limit =
        Limit::per(uniform(rng, 1, 12), kPeriods[static_cast<std::size_t>(uniform(rng, 0, 3))]);
    return Model::kBucket ? limit.withBurst(uniform(rng, 1, 15)) : limit;
}

}  // namespace

/// A random penalty for a limit of `period`: 1 … 4 strikes within ½ … 2 periods, a block of
/// ½ … 2 periods.
ratelimit::Penalty randomPenalty(Rng& rng, std::chrono::nanoseconds period) {
    return {uniform(rng, 1, 4), period / 2 * uniform(rng, 1, 4), period / 2 * uniform(rng, 1, 4)};
}

/// Random limits for `Model`: a set's, one per member; a penalized model's, with a penalty.
template <class Model>
ratelimit::LimitOf<Model> randomLimits(Rng& rng) {
    if constexpr (ratelimit::detail::kIsPenalized<Model>) {
        const Limit limit = randomMemberLimit<typename Model::Inner>(rng);
        return {limit, randomPenalty(rng, limit.period)};
    } else if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return typename Model::Limits{
                randomMemberLimit<typename Model::template Member<I>>(rng)...};
        }
        (std::make_index_sequence<Model::kSize>{});
    } else {
        return randomMemberLimit<Model>(rng);
    }
}

/// Replays one random walk of calls on `memory` and `redis` (same limits, same clock): takes,
/// peeks and refunds (a penalized model's strikes in place of half the refunds), the clock
/// moving back and forth, and with `changes`, the limit replaced
/// now and then (`setLimit`); every decision must agree, a set's member by member. After a
/// change the clock stays after every call before it: memory answers a call from before a
/// change at the change, Redis at its own time (docs/semantics.md, "Changing a limit").
/// Returns how many calls started a penalty's block.
template <class Model>
int replayRandomWalk(Rng& rng, ratelimit::LimitOf<Model> limits, ManualClock& clock,
                     MemoryLimiter<Model>& memory, RedisLimiter<Model>& redis,
                     bool changes = false) {
    std::int64_t nowUs = uniform(rng, 0, std::int64_t{1} << 45);
    std::int64_t latestUs = 0;
    std::int64_t floorUs = 0;  // after the last change and every call before it
    std::string changed = "no change";
    const auto pacing = [&] {
        if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
            const Limit& paced =
                limits[static_cast<std::size_t>(uniform(rng, 0, Model::kSize - 1))];
            return std::pair{paced.period, paced.count};
        } else if constexpr (ratelimit::detail::kIsPenalized<Model>) {
            return std::pair{limits.limit.period, limits.limit.count};
        } else {
            return std::pair{limits.period, limits.count};
        }
    };
    std::int64_t capacity = Model::capacity(limits);
    std::int64_t lastRemaining = capacity;
    int blocks = 0;
    for (int step = 0; step < 150; ++step) {
        if (changes && uniform(rng, 0, 11) == 0) {
            limits = randomLimits<Model>(rng);
            changed = "changed before step " + std::to_string(step);
            memory.setLimit(limits);
            redis.setLimit(limits);
            capacity = Model::capacity(limits);
            floorUs = latestUs + 1;
        }
        const auto [period, count] = pacing();
        const std::int64_t us =
            std::chrono::duration_cast<std::chrono::microseconds>(period).count();
        nowUs = std::max<std::int64_t>(
            floorUs, nowUs + randomMove(rng, us, std::max<std::int64_t>(1, us / count)));
        clock.set(std::chrono::microseconds{nowUs});
        latestUs = std::max(latestUs, nowUs);
        const std::int64_t cost = randomCost(rng, capacity, lastRemaining);
        const std::int64_t kind = uniform(rng, 0, 9);  // 0: a peek, 1-2: a refund, else a take
        INFO("step " << step << " at " << nowUs << "us cost " << cost << " kind " << kind << ", "
                     << changed);
        const auto call = [&](auto& limiter, auto&... each) {
            if (kind == 0) {
                return limiter.peek("key", cost, each...);
            }
            if constexpr (ratelimit::detail::kIsPenalized<Model>) {
                if (kind == 1) {
                    return limiter.penalize("key", cost);
                }
            }
            return kind <= 2 ? limiter.refund("key", cost, each...)
                             : limiter.tryAcquire("key", cost, each...);
        };
        if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
            typename Model::Decisions inMemory;
            typename Model::Decisions inRedis;
            const Decision m = call(memory, inMemory);
            const Decision r = call(redis, inRedis);
            INFO(parity(m, r));
            REQUIRE(parity(m, r).empty());
            REQUIRE(m.policy == r.policy);
            for (std::size_t i = 0; i < Model::kSize; ++i) {
                INFO("member " << i << ": " << parity(inMemory[i], inRedis[i]));
                REQUIRE(parity(inMemory[i], inRedis[i]).empty());
            }
            lastRemaining = r.remaining;
        } else {
            const Decision m = call(memory);
            const Decision r = call(redis);
            INFO(parity(m, r));
            REQUIRE(parity(m, r).empty());
            lastRemaining = r.remaining;
            blocks += r.penaltyStarted ? 1 : 0;
        }
    }
    return blocks;
}

/// An hour's late-call tolerance keeps every key in Redis for an hour of real time at least,
/// so Redis never drops a state the simulated clock still needs (memory and Redis read a stale
/// state alike); steps back by more than an hour still rebase.
LimiterOptions walkOptions(const std::string& name) {
    LimiterOptions options = limiterOptions(name);
    options.lateCallTolerance = 1h;
    return options;
}

TEMPLATE_LIST_TEST_CASE(
    "RedisStorage: a limit set decides and refunds as in memory, member by "
    "member",
    "[redis_storage][redis][limit_set][refund]", RedisSets) {
    using Set = TestType;
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-set-parity"));
    Rng rng(testSeed() + Set::kSize);
    for (int round = 0; round < 12; ++round) {
        INFO("round " << round);
        const auto limits = [&]<std::size_t... I>(std::index_sequence<I...>) {
            return
                typename Set::Limits{randomMemberLimit<typename Set::template Member<I>>(rng)...};
        }
        (std::make_index_sequence<Set::kSize>{});
        const LimiterOptions options = walkOptions("parity" + std::to_string(round));
        ManualClock clock;
        MemoryLimiter<Set> memory(limits, MemoryStorage{}, clock, options);
        RedisLimiter<Set> redis(limits, storage, clock, options);
        replayRandomWalk<Set>(rng, limits, clock, memory, redis);
    }
    CHECK(storage.stats().failures == 0);
}

TEMPLATE_TEST_CASE("RedisStorage: a refund gives back as in memory",
                   "[redis_storage][redis][refund]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-refund-parity"));
    Rng rng(testSeed() + 17);
    for (int round = 0; round < 12; ++round) {
        INFO("round " << round);
        const Limit limit = randomMemberLimit<TestType>(rng);
        const LimiterOptions options = walkOptions("refund" + std::to_string(round));
        ManualClock clock;
        MemoryLimiter<TestType> memory(limit, MemoryStorage{}, clock, options);
        RedisLimiter<TestType> redis(limit, storage, clock, options);
        replayRandomWalk<TestType>(rng, limit, clock, memory, redis);
    }
    CHECK(storage.stats().failures == 0);
}

TEMPLATE_TEST_CASE("RedisStorage: a limit changed under way carries every key over as in memory",
                   "[redis_storage][redis][limit_change]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-change-parity"));
    Rng rng(testSeed() + 29);
    for (int round = 0; round < 12; ++round) {
        INFO("round " << round);
        const Limit limit = randomMemberLimit<TestType>(rng);
        const LimiterOptions options = walkOptions("change" + std::to_string(round));
        ManualClock clock;
        MemoryLimiter<TestType> memory(limit, MemoryStorage{}, clock, options);
        RedisLimiter<TestType> redis(limit, storage, clock, options);
        replayRandomWalk<TestType>(rng, limit, clock, memory, redis, true);
    }
    CHECK(storage.stats().failures == 0);
}

/// Replays one random walk of calls on two `TieredLimiter`s over memory and Redis (same tiers,
/// same clock): takes, peeks and refunds, the key's tier switched now and then, the clock moving
/// back and forth; every decision must agree, a set's member by member. After a switch the
/// clock stays after every call before it until a call stores the key under its new tier: a
/// late call that meets a switch is answered at the last write in memory and at its own time in
/// Redis (docs/semantics.md, "Tiers").
template <class Model>
void replayTierWalk(Rng& rng, const std::vector<ratelimit::LimitOf<Model>>& tiers,
                    ManualClock& clock,
                    ratelimit::TieredLimiter<Model, MemoryStorage, ManualClock>& memory,
                    ratelimit::TieredLimiter<Model, RedisStorage, ManualClock>& redis) {
    std::int64_t nowUs = uniform(rng, 0, std::int64_t{1} << 45);
    std::int64_t latestUs = 0;
    std::uint32_t tier = 0;
    bool switching = false;  // until a call stores the key under its new tier
    std::int64_t lastRemaining = 0;
    for (int step = 0; step < 150; ++step) {
        if (uniform(rng, 0, 4) == 0) {
            tier = static_cast<std::uint32_t>(uniform(rng, 0, std::ssize(tiers) - 1));
            switching = true;
        }
        const ratelimit::LimitOf<Model>& limits = tiers[tier];
        const Limit& paced = [&]() -> const Limit& {
            if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
                return limits[static_cast<std::size_t>(uniform(rng, 0, Model::kSize - 1))];
            } else {
                return limits;
            }
        }();
        const std::int64_t us =
            std::chrono::duration_cast<std::chrono::microseconds>(paced.period).count();
        nowUs = nowUs + randomMove(rng, us, std::max<std::int64_t>(1, us / paced.count));
        if (switching) {
            nowUs = std::max(nowUs, latestUs + 1);
        }
        clock.set(std::chrono::microseconds{nowUs});
        latestUs = std::max(latestUs, nowUs);
        const std::int64_t cost = randomCost(rng, Model::capacity(limits), lastRemaining);
        const std::int64_t kind = uniform(rng, 0, 9);  // 0: a peek, 1: a refund, else a take
        INFO("step " << step << " at " << nowUs << "us tier " << tier << " cost " << cost
                     << " kind " << kind);
        const auto call = [&](auto& limiter, auto&... each) {
            if (kind == 0) {
                return limiter.peek("key", tier, cost, each...);
            }
            return kind == 1 ? limiter.refund("key", tier, cost)
                             : limiter.tryAcquire("key", tier, cost, each...);
        };
        if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
            typename Model::Decisions inMemory{};
            typename Model::Decisions inRedis{};
            const Decision m = call(memory, inMemory);
            const Decision r = call(redis, inRedis);
            INFO(parity(m, r));
            REQUIRE(parity(m, r).empty());
            if (kind != 1) {
                for (std::size_t i = 0; i < Model::kSize; ++i) {
                    INFO("member " << i << ": " << parity(inMemory[i], inRedis[i]));
                    REQUIRE(parity(inMemory[i], inRedis[i]).empty());
                }
            }
            lastRemaining = r.remaining;
        } else {
            const Decision m = call(memory);
            const Decision r = call(redis);
            INFO(parity(m, r));
            REQUIRE(parity(m, r).empty());
            lastRemaining = r.remaining;
        }
        switching = switching && (kind == 0 || cost == 0);
    }
}

TEMPLATE_TEST_CASE("RedisStorage: tiers carry a key over as in memory",
                   "[redis_storage][redis][tiers][limit_change]", RATELIMIT_TEST_MODELS,
                   (LimitSet<TokenBucketModel, FixedWindowModel>)) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-tier-parity"));
    Rng rng(testSeed() + 37);
    for (int round = 0; round < 10; ++round) {
        INFO("round " << round);
        std::vector<ratelimit::LimitOf<TestType>> limits;
        std::vector<typename ratelimit::TieredLimiter<TestType>::Tier> tiers;
        const auto count = uniform(rng, 2, 3);
        limits.reserve(static_cast<std::size_t>(count));
        tiers.reserve(static_cast<std::size_t>(count));
        for (std::int64_t t = 0; t < count; ++t) {
            limits.push_back(randomLimits<TestType>(rng));
            tiers.push_back({"t" + std::to_string(t), limits.back()});
        }
        const LimiterOptions options = walkOptions("tiers" + std::to_string(round));
        ManualClock clock;
        ratelimit::TieredLimiter<TestType, MemoryStorage, ManualClock> memory(
            tiers, MemoryStorage{}, clock, options);
        ratelimit::TieredLimiter<TestType, RedisStorage, ManualClock> redis(tiers, storage, clock,
                                                                            options);
        replayTierWalk<TestType>(rng, limits, clock, memory, redis);
    }
    CHECK(storage.stats().failures == 0);
    // One round trip per check, whatever its tier (a script's first load aside).
    CHECK(storage.stats().requests - storage.stats().scriptResends == std::uint64_t{10} * 150);
}

TEST_CASE("RedisStorage: the tier table, a free key's burst and then one call per 2 s all day",
          "[redis_storage][redis][tiers]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    using Plans = ratelimit::TieredLimiter<Set, RedisStorage, ManualClock>;
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-tier-table"));
    ManualClock clock;
    Plans plans({{"free", {Limit::perMinute(30).withBurst(10), Limit::perDay(1000)}},
                 {"pro", {Limit::perMinute(300).withBurst(50), Limit::perDay(50000)}},
                 {"enterprise", {Limit::perMinute(3000).withBurst(200), Limit::perDay(500000)}}},
                storage, clock, walkOptions("plans"));
    const Plans::TierId free = plans.tier("free");
    std::int64_t admitted = 0;
    for (int i = 0; i < 15; ++i) {
        admitted += plans.tryAcquire("api-key-1", free).allowed ? 1 : 0;
    }
    CHECK(admitted == 10);
    Decision last;
    for (int second = 2; second < 24 * 3600; second += 2) {
        clock.set(std::chrono::seconds{second});
        last = plans.tryAcquire("api-key-1", free);
        if (!last.allowed) {
            break;
        }
        ++admitted;
    }
    CHECK(admitted == 1000);
    CHECK(last.policy == 1);  // the day's member binds
    // Upgraded to pro: no more today than free's day leaves (docs/semantics.md, "Tiers").
    const Decision pro = plans.tryAcquire("api-key-1", plans.tier("pro"));
    CHECK(!pro.allowed);
    CHECK(pro.policy == 1);
    CHECK(storage.stats().failures == 0);
}

TEMPLATE_TEST_CASE("RedisStorage: a penalty strikes, blocks and expires as in memory",
                   "[redis_storage][redis][penalty][limit_change]",
                   ratelimit::PenalizedModel<FixedWindowModel>,
                   ratelimit::PenalizedModel<SlidingCounterModel>,
                   ratelimit::PenalizedModel<TokenBucketModel>,
                   ratelimit::PenalizedModel<LeakyBucketModel>) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-penalty-parity"));
    Rng rng(testSeed() + 31);
    int blocks = 0;
    for (int round = 0; round < 12; ++round) {
        INFO("round " << round);
        const auto limits = randomLimits<TestType>(rng);
        const LimiterOptions options = walkOptions("penalty" + std::to_string(round));
        ManualClock clock;
        MemoryLimiter<TestType> memory(limits, MemoryStorage{}, clock, options);
        RedisLimiter<TestType> redis(limits, storage, clock, options);
        blocks += replayRandomWalk<TestType>(rng, limits, clock, memory, redis, round % 2 == 1);
    }
    // Blocks started, each reported alike by both stores (`parity`).
    CHECK(blocks > 0);
    CHECK(storage.stats().failures == 0);
    // One round trip per check, strikes and blocks included (a script's first load aside).
    CHECK(storage.stats().requests - storage.stats().scriptResends == std::uint64_t{12} * 150);
}

TEMPLATE_LIST_TEST_CASE("RedisStorage: a set with a member in dry-run decides as in memory",
                        "[redis_storage][redis][limit_set][dry_run]", RedisSets) {
    using Set = TestType;
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-set-dry-run"));
    Rng rng(testSeed() + 41 + Set::kSize);
    for (int round = 0; round < 8; ++round) {
        INFO("round " << round);
        const auto limits = randomLimits<Set>(rng);
        LimiterOptions options = walkOptions("dry" + std::to_string(round));
        options.dryRunMembers = std::uint64_t{1} << (static_cast<std::size_t>(round) % Set::kSize);
        ManualClock clock;
        MemoryLimiter<Set> memory(limits, MemoryStorage{}, clock, options);
        RedisLimiter<Set> redis(limits, storage, clock, options);
        replayRandomWalk<Set>(rng, limits, clock, memory, redis);
        CHECK(memory.dryRunRefusals() == redis.dryRunRefusals());
    }
    CHECK(storage.stats().failures == 0);
}

TEST_CASE("RedisStorage: a blocked key outlives its block in Redis, not the model's reset",
          "[redis_storage][redis][penalty]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    using Model = ratelimit::PenalizedModel<FixedWindowModel>;
    const RedisStorage storage(storageOptions(*server, "rl-penalty-ttl"));
    const LimiterOptions options = limiterOptions("ttl");
    ratelimit::Limiter<Model, RedisStorage> limiter(
        {Limit::perSecond(1), ratelimit::Penalty{1, 1s, 10min}}, storage, {}, options);
    const Decision first = limiter.tryAcquire("k");
    REQUIRE(first.allowed);
    const Decision struck = limiter.tryAcquire("k");
    REQUIRE(!struck.allowed);
    CHECK(struck.retryAfter == 10min);
    const auto raw = connectTo(*server);
    const std::int64_t ttl = integerReply(
        command(raw.get(), {"PTTL", redisKeyOf<Model>("rl-penalty-ttl", options.name, "k")}));
    // The window alone keeps the key about a second; the block, ten minutes.
    CHECK(ttl > std::chrono::milliseconds{9min}.count());
    CHECK(ttl <= std::chrono::milliseconds{10min + 2s}.count());
    CHECK(!limiter.tryAcquire("k").allowed);
}

TEST_CASE("RedisStorage: in dry-run, a blocked key's strikes and refunds are admitted and marked",
          "[redis_storage][redis][penalty][refund][dry_run]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    using Model = ratelimit::PenalizedModel<FixedWindowModel>;
    const RedisStorage storage(storageOptions(*server, "rl-penalty-dry-run"));
    LimiterOptions options = limiterOptions("shadow");
    options.dryRun = true;
    ManualClock clock;
    clock.set(1h);
    RedisLimiter<Model> shadow({Limit::perMinute(1), ratelimit::Penalty{1, 1min, 1h}}, storage,
                               clock, options);
    REQUIRE(shadow.tryAcquire("k").allowed);
    REQUIRE(shadow.tryAcquire("k").wouldRefuse);  // the one strike: a block
    clock.advance(10min);
    for (const Decision& d : {shadow.penalize("k"), shadow.penalize("k", 0), shadow.refund("k"),
                              shadow.refund("k", 0), shadow.peek("k", 0)}) {
        INFO(describe(d));
        CHECK(d.allowed);
        CHECK(d.wouldRefuse);
        CHECK(d.remaining == 0);
        CHECK(d.retryAfter == 50min);
    }
    CHECK(shadow.dryRunRefusals() == 1);  // only the refused take counts
}

TEMPLATE_LIST_TEST_CASE("RedisStorage: a limit set's change carries each member over as in memory",
                        "[redis_storage][redis][limit_set][limit_change]", RedisSets) {
    using Set = TestType;
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-set-change"));
    Rng rng(testSeed() + 31 + Set::kSize);
    for (int round = 0; round < 8; ++round) {
        INFO("round " << round);
        const auto limits = randomLimits<Set>(rng);
        const LimiterOptions options = walkOptions("set-change" + std::to_string(round));
        ManualClock clock;
        MemoryLimiter<Set> memory(limits, MemoryStorage{}, clock, options);
        RedisLimiter<Set> redis(limits, storage, clock, options);
        replayRandomWalk<Set>(rng, limits, clock, memory, redis, true);
    }
    CHECK(storage.stats().failures == 0);
}

TEST_CASE(
    "RedisStorage: hosts on the old limit and on the new one share a key toward fewer "
    "admissions",
    "[redis_storage][redis][limit_change]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    // Two hosts in the middle of a deploy: one still on 10 per minute, one already on 20.
    const RedisStorage oldHost(storageOptions(*server, "rl-deploy"));
    const RedisStorage newHost(storageOptions(*server, "rl-deploy"));
    ManualClock clock;
    clock.set(10s);
    RedisLimiter<FixedWindowModel> before(Limit::perMinute(10), oldHost, clock,
                                          limiterOptions("api"));
    RedisLimiter<FixedWindowModel> after(Limit::perMinute(20), newHost, clock,
                                         limiterOptions("api"));
    CHECK(send(before, 6, "k").first == 6);
    clock.set(20s);
    // The new host carries the key over: the window holds the 10 the old limit allowed.
    CHECK(send(after, 20, "k").first == 4);
    clock.set(30s);
    CHECK(send(before, 10, "k").first == 0);
    CHECK(after.peek("k", 0).remaining == 0);
    // The next window is the new limit's for the new host, and each host carries it over.
    clock.set(60s);
    CHECK(send(after, 5, "k").first == 5);
    clock.set(61s);
    CHECK(before.peek("k", 0).remaining == 5);  // min(10 − 5, 20 − 5)
    CHECK(send(before, 10, "k").first == 5);
    CHECK(after.peek("k", 0).remaining == 0);
    CHECK(oldHost.stats().failures == 0);
    CHECK(newHost.stats().failures == 0);
}

TEST_CASE("RedisStorage: a limit set keeps one key per member under one hash tag",
          "[redis_storage][redis][limit_set]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    const auto server = startServer();
    if (!server) {
        return;
    }
    const std::string prefix = "rl-set-keys";
    const RedisStorage storage(storageOptions(*server, prefix));
    ManualClock clock;
    clock.set(1'726'000'000s);
    RedisLimiter<Set> limiter({Limit::perMinute(30).withBurst(10), Limit::perDay(1'000)}, storage,
                              clock, limiterOptions("tiers"));
    CHECK(limiter.tryAcquire("api {key}").allowed);
    const auto raw = connectTo(*server);
    // `<prefix>:<name>:<set>:<member>:<model>:v<version>{<length>:<key>}`
    const auto keyOf = [&](const std::string& name, int member, std::string_view model, int version,
                           std::string_view key) {
        return prefix + ":" + name + ":token_bucket+fixed_window:" + std::to_string(member) + ":" +
               std::string(model) + ":v" + std::to_string(version) + "{" +
               std::to_string(key.size()) + ":" + std::string(key) + "}";
    };
    const auto bucketKey = [&](const std::string& name, std::string_view key) {
        return keyOf(name, 0, TokenBucketModel::kName, TokenBucketModel::kStateVersion, key);
    };
    const auto windowKey = [&](const std::string& name, std::string_view key) {
        return keyOf(name, 1, FixedWindowModel::kName, FixedWindowModel::kStateVersion, key);
    };
    std::vector<std::string> keys = scanAll(raw.get());
    std::sort(keys.begin(), keys.end());
    CHECK(keys == std::vector<std::string>{bucketKey("tiers", "api {key}"),
                                           windowKey("tiers", "api {key}")});
    // Each member's key lives as long as its own state needs: 2 s to refill a token, the rest
    // of the day for the window.
    const std::int64_t bucketTtl =
        integerReply(command(raw.get(), {"PTTL", bucketKey("tiers", "api {key}")}));
    const std::int64_t windowTtl =
        integerReply(command(raw.get(), {"PTTL", windowKey("tiers", "api {key}")}));
    CHECK(bucketTtl > 1'000);
    CHECK(bucketTtl <= 2'000 + 1'000 + 1);  // 2 s, the late-call tolerance (1 s), 1 ms
    CHECK(windowTtl > 3'600'000);
    limiter.reset("api {key}");
    CHECK(scanAll(raw.get()).empty());

    // A refusal by one member writes no other member's key: with the bucket's key gone (a
    // fresh bucket, which admits), the day's refusal leaves it unwritten.
    RedisLimiter<Set> daily({Limit::perMinute(30).withBurst(10), Limit::perDay(1)}, storage, clock,
                            limiterOptions("daily"));
    CHECK(daily.tryAcquire("k").allowed);
    CHECK(integerReply(command(raw.get(), {"DEL", bucketKey("daily", "k")})) == 1);
    const std::string window = stringReply(command(raw.get(), {"GET", windowKey("daily", "k")}));
    clock.advance(1s);
    Set::Decisions each;
    CHECK_FALSE(daily.tryAcquire("k", 1, each).allowed);
    CHECK(each[0].allowed);
    CHECK(scanAll(raw.get()) == std::vector<std::string>{windowKey("daily", "k")});
    CHECK(stringReply(command(raw.get(), {"GET", windowKey("daily", "k")})) == window);
}

TEST_CASE("RedisStorage: several keys for one request take from every one or from none",
          "[redis_storage][redis][refund]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-keys"));
    ManualClock clock;
    clock.set(1'726'000'000s);
    RedisLimiter<TokenBucketModel> byAddress(Limit::perHour(5), storage, clock,
                                             limiterOptions("address"));
    RedisLimiter<FixedWindowModel> byUser(Limit::perHour(2), storage, clock,
                                          limiterOptions("user"));
    const auto request = [&](std::string_view user) {
        return ratelimit::tryAcquireAll(ratelimit::KeyCheck{byAddress, "203.0.113.7"},
                                        ratelimit::KeyCheck{byUser, user});
    };
    CHECK(request("alice")[1].allowed);
    CHECK(request("alice")[1].allowed);
    for (int i = 0; i < 5; ++i) {
        const auto [address, user] = request("alice");
        CHECK_FALSE(user.allowed);
        CHECK(address.remaining == 3);  // given back
    }
    CHECK(request("bob")[1].allowed);
    CHECK(byAddress.peek("203.0.113.7", 0).remaining == 2);
    CHECK(storage.stats().failures == 0);
}

TEST_CASE("RedisStorage: the failure policies answer for every member of a set",
          "[redis_storage][redis][limit_set]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    RedisStorage::Options o;
    o.port = closedPort();
    o.timeout = 200ms;
    const RedisStorage storage(o);
    ManualClock clock;
    const Set::Limits limits{Limit::perMinute(30).withBurst(10), Limit::perDay(4)};
    Set::Decisions each;
    SECTION("fail open") {
        RedisLimiter<Set> limiter(limits, storage, clock,
                                  limiterOptions("open", ratelimit::FailurePolicy::kFailOpen));
        const Decision d = limiter.tryAcquire("k", 2, each);
        CHECK(d.degraded);
        CHECK(d.allowed);
        CHECK(d.policy == 1);  // 2 left of 4 is the least
        CHECK(d.remaining == 2);
        CHECK(each[0].degraded);
        CHECK(each[0].remaining == 8);
        CHECK(each[1].remaining == 2);
    }
    SECTION("fail closed") {
        RedisLimiter<Set> limiter(limits, storage, clock,
                                  limiterOptions("closed", ratelimit::FailurePolicy::kFailClosed));
        const Decision d = limiter.tryAcquire("k", 5, each);
        CHECK(d.degraded);
        CHECK_FALSE(d.allowed);
        CHECK(d.never());  // 5 is above the day's 4
        CHECK(d.policy == 1);
        CHECK_FALSE(each[0].never());
    }
    SECTION("fall back to memory") {
        RedisLimiter<Set> limiter(
            limits, storage, clock,
            limiterOptions("fallback", ratelimit::FailurePolicy::kFallBackToMemory));
        for (int i = 0; i < 4; ++i) {
            CHECK(limiter.tryAcquire("k", 1, each).allowed);
        }
        const Decision d = limiter.tryAcquire("k", 1, each);
        CHECK(d.degraded);
        CHECK_FALSE(d.allowed);
        CHECK(d.policy == 1);
        CHECK(each[0].remaining == 6);  // the refusal took nothing from the bucket
    }
}

}  // namespace ratelimit_test
