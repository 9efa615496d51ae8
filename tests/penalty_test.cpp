// Tests of penalties over the memory storage (include/ratelimit/algorithms/penalty.hpp,
// `Limiter::penalize`): strikes from refusals and from `penalize` start a block of exactly its
// duration, to the nanosecond; a blocked key's calls never lengthen it; strikes older than the
// window start a new count; peeks and zero costs are never strikes (a zero cost's strikes or
// refund answers as a peek and changes nothing, for every model); in dry-run, strikes and
// refunds are admitted and marked as peeks are; refunds, limit changes and clock steps keep the
// penalty; 8 threads on one penalized key admit exactly the limit.
// Bad penalties throw naming the field. The Redis side, the same decisions in one script, is
// in tests/storage/redis_policies_test.cpp.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <ratelimit/ratelimit.hpp>

#include "support/catch.hpp"
#include "support/decision_string.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

using ratelimit::FixedWindowModel;
using ratelimit::PenalizedModel;
using ratelimit::Penalty;
using ratelimit::TokenBucketModel;

namespace {

template <class Model>
using Penalized = MemoryLimiter<PenalizedModel<Model>>;

/// Whether `d` is a block's refusal with `left` of it to go.
bool blockedFor(const Decision& d, std::chrono::nanoseconds left) {
    return !d.allowed && d.remaining == 0 && d.retryAfter == left;
}

}  // namespace

TEST_CASE("Penalty: 5 failed logins in 15 minutes block the key for exactly 15 minutes",
          "[penalty]") {
    ManualClock clock;
    clock.set(1h);
    Penalized<FixedWindowModel> login({Limit::perMinute(100), Penalty{5, 15min, 15min}},
                                      MemoryStorage{}, clock);
    for (int failure = 1; failure <= 4; ++failure) {
        REQUIRE(login.tryAcquire("alice").allowed);
        const Decision after = login.penalize("alice");
        INFO("failure " << failure << ": " << describe(after));
        REQUIRE(after.allowed);  // a strike alone refuses nothing
        clock.advance(2min);
    }
    REQUIRE(login.tryAcquire("alice").allowed);
    const Decision fifth = login.penalize("alice");
    CHECK(blockedFor(fifth, 15min));
    const auto blockedAt = clock.now();
    // Whatever it sends meanwhile is refused, and lengthens nothing.
    for (int call = 0; call < 30; ++call) {
        clock.set(blockedAt + call * 30s);
        const Decision d = login.tryAcquire("alice");
        INFO("call " << call << ": " << describe(d));
        REQUIRE(blockedFor(d, 15min - call * 30s));
        REQUIRE(blockedFor(login.penalize("alice", 3), 15min - call * 30s));
    }
    clock.set(blockedAt + 15min - 1ns);
    CHECK(blockedFor(login.tryAcquire("alice"), 1ns));
    clock.set(blockedAt + 15min);
    CHECK(login.tryAcquire("alice").allowed);
    // Another key never noticed.
    CHECK(login.tryAcquire("bob").remaining == 99);
}

TEST_CASE("Penalty: refusals are strikes, and the one that completes them reports the block",
          "[penalty]") {
    ManualClock clock;
    Penalized<TokenBucketModel> api({Limit::perSecond(1).withBurst(2), Penalty{3, 1min, 10min}},
                                    MemoryStorage{}, clock);
    REQUIRE(api.tryAcquire("k").allowed);
    REQUIRE(api.tryAcquire("k").allowed);
    const Decision first = api.tryAcquire("k");
    CHECK(!first.allowed);
    CHECK(first.retryAfter == 1s);  // the bucket's own wait: no block yet
    CHECK_FALSE(first.penaltyStarted);
    CHECK(!api.tryAcquire("k").allowed);
    const Decision third = api.tryAcquire("k");
    CHECK(!third.allowed);
    CHECK(third.retryAfter == 10min);
    CHECK(third.resetAfter == 10min);
    CHECK(third.penaltyStarted);
    // A refusal at the same instant meets the block: it reports the same wait, but started
    // nothing.
    const Decision during = api.tryAcquire("k");
    CHECK(during.retryAfter == 10min);
    CHECK_FALSE(during.penaltyStarted);
    // The bucket refills meanwhile; the block holds.
    clock.advance(5min);
    CHECK(blockedFor(api.tryAcquire("k"), 5min));
    clock.advance(5min);
    const Decision after = api.tryAcquire("k");
    CHECK(after.allowed);
    CHECK(after.remaining == 1);
}

TEST_CASE("Penalty: strikes count from the first; once the window passed, a new count starts",
          "[penalty]") {
    ManualClock clock;
    Penalized<FixedWindowModel> limiter({Limit::perHour(1000), Penalty{3, 10min, 1h}},
                                        MemoryStorage{}, clock);
    CHECK(limiter.penalize("k", 2).allowed);
    clock.advance(10min);  // the window of the first strike is over
    CHECK(limiter.penalize("k", 2).allowed);
    clock.advance(10min - 1ns);
    const Decision third = limiter.penalize("k");
    CHECK(blockedFor(third, 1h));
    // A cost of strikes at or above the count blocks at once.
    CHECK(blockedFor(limiter.penalize("other", 3), 1h));
    CHECK(limiter.penalize("zero", 0).allowed);
    CHECK(limiter.tryAcquire("zero").remaining == 999);
}

TEST_CASE("Penalty: peeks, zero costs and admissions are never strikes", "[penalty]") {
    ManualClock clock;
    Penalized<FixedWindowModel> limiter({Limit::perMinute(1), Penalty{1, 1min, 1h}},
                                        MemoryStorage{}, clock);
    REQUIRE(limiter.tryAcquire("k").allowed);
    for (int i = 0; i < 5; ++i) {
        CHECK(!limiter.peek("k").allowed);
        CHECK(limiter.tryAcquire("k", 0).allowed);
    }
    clock.advance(1min);
    CHECK(limiter.tryAcquire("k").allowed);
    // The first refusal is the one strike: a block, reported by a peek too.
    CHECK(blockedFor(limiter.tryAcquire("k"), 1h));
    CHECK(blockedFor(limiter.peek("k"), 1h));
    // A cost above the limit can never pass, blocked or not.
    CHECK(limiter.tryAcquire("k", 2).never());
}

TEMPLATE_TEST_CASE("Penalty: a zero cost's refund or strikes answer as a peek, and change nothing",
                   "[penalty][refund]", RATELIMIT_TEST_MODELS) {
    // Two limiters take the same random takes, strikes and refunds, the clock moving on or
    // back between them (late calls, steps back); one of them also gets zero-cost refunds,
    // strikes and takes after each. Those must answer exactly as the other's peek, and the two
    // must decide alike to the end: a zero cost that changed what the key decides (a strike
    // given, a unit given back, a late answer's time kept) shows in a later decision. The
    // sliding log answers them as a peek, the other models by stepping a copy.
    ManualClock clock;
    clock.set(3h);
    const ratelimit::PenalizedLimit<Limit> limits{Limit::per(4, 10s).withBurst(3),
                                                  Penalty{3, 20s, 30s}};
    Penalized<TestType> probed(limits, MemoryStorage{{.maxKeys = 64}}, clock);
    Penalized<TestType> twin(limits, MemoryStorage{{.maxKeys = 64}}, clock);
    Rng rng(20261204);
    int blocks = 0;
    int earlier = 0;  // zero-cost calls at a time before the action's
    for (int i = 0; i < 3'000; ++i) {
        clock.advance(std::chrono::milliseconds{uniform(rng, -1'500, 4'000)});
        const std::int64_t cost = uniform(rng, 1, 3);
        const std::int64_t action = uniform(rng, 0, 3);  // 0: strikes, 1: a refund, else a take
        const auto act = [&](Penalized<TestType>& limiter) {
            return action == 0   ? limiter.penalize("k", cost)
                   : action == 1 ? limiter.refund("k", cost)
                                 : limiter.tryAcquire("k", cost);
        };
        const Decision acted = act(probed);
        INFO("step " << i << ": action " << action << " of cost " << cost);
        REQUIRE(acted == act(twin));
        blocks += acted.penaltyStarted ? 1 : 0;
        const std::chrono::milliseconds move{uniform(rng, -1'500, 4'000)};
        earlier += move < 0ms ? 1 : 0;
        clock.advance(move);
        const Decision peek = twin.peek("k", 0);
        INFO("then " << move.count() << " ms");
        REQUIRE(probed.refund("k", 0) == peek);
        REQUIRE(probed.penalize("k", 0) == peek);
        REQUIRE(probed.tryAcquire("k", 0) == peek);
    }
    // The walk met blocks and calls before the last write.
    CHECK(blocks > 0);
    CHECK(earlier > 0);
}

TEST_CASE("Penalty: in dry-run, a blocked key's strikes and refunds are admitted and marked",
          "[penalty][refund][dry_run]") {
    ManualClock clock;
    const ratelimit::PenalizedLimit<Limit> limits{Limit::perMinute(1), Penalty{1, 1min, 1h}};
    Penalized<FixedWindowModel> enforcing(limits, MemoryStorage{}, clock);
    Penalized<FixedWindowModel> shadow(limits, MemoryStorage{}, clock,
                                       {.name = "shadow", .dryRun = true});
    REQUIRE(enforcing.tryAcquire("k").allowed);
    REQUIRE(shadow.tryAcquire("k").allowed);
    REQUIRE(blockedFor(enforcing.tryAcquire("k"), 1h));  // the one strike: a block
    REQUIRE(shadow.tryAcquire("k").wouldRefuse);
    clock.advance(10min);
    const auto sameCalls = [&](auto call) {
        const Decision e = call(enforcing);
        const Decision d = call(shadow);
        CHECK(blockedFor(e, 50min));
        CHECK(d.allowed);
        CHECK(d.wouldRefuse);
        CHECK(d.remaining == e.remaining);
        CHECK(d.retryAfter == e.retryAfter);
        CHECK(d.resetAfter == e.resetAfter);
    };
    sameCalls([](auto& limiter) { return limiter.penalize("k"); });
    sameCalls([](auto& limiter) { return limiter.penalize("k", 0); });
    sameCalls([](auto& limiter) { return limiter.refund("k"); });
    sameCalls([](auto& limiter) { return limiter.refund("k", 0); });
    sameCalls([](auto& limiter) { return limiter.peek("k", 0); });
    CHECK(shadow.dryRunRefusals() == 1);  // only the refused take counts
}

TEST_CASE("Penalty: a clock that steps back never shortens a block", "[penalty]") {
    ManualClock clock;
    clock.set(10h);
    Penalized<TokenBucketModel> limiter({Limit::perMinute(1), Penalty{1, 1min, 20min}},
                                        MemoryStorage{}, clock);
    REQUIRE(limiter.tryAcquire("k").allowed);
    REQUIRE(blockedFor(limiter.tryAcquire("k"), 20min));
    clock.set(10h - 2h);
    CHECK(blockedFor(limiter.tryAcquire("k"), 2h + 20min));
    clock.set(10h + 20min);
    CHECK(limiter.tryAcquire("k").allowed);
}

TEST_CASE("Penalty: refunds pass to the model, and setLimit keeps strikes and blocks",
          "[penalty][refund][limit_change]") {
    ManualClock clock;
    Penalized<TokenBucketModel> limiter({Limit::perHour(2), Penalty{2, 1h, 30min}}, MemoryStorage{},
                                        clock);
    REQUIRE(limiter.tryAcquire("k").allowed);
    REQUIRE(limiter.tryAcquire("k").allowed);
    CHECK(limiter.refund("k").remaining == 1);
    REQUIRE(limiter.tryAcquire("k").allowed);
    REQUIRE(!limiter.tryAcquire("k").allowed);  // one strike
    // (A change takes effect after every call so far: the clock moves on before the next.)
    limiter.setLimit({Limit::perHour(2), Penalty{2, 1h, 45min}});
    CHECK(limiter.limit().penalty.blockFor == 45min);
    clock.set(1min);
    CHECK(blockedFor(limiter.tryAcquire("k"), 45min));  // the second strike, the new block
    limiter.setLimit({Limit::perHour(4), Penalty{2, 1h, 10min}});
    clock.set(11min - 1ns);
    CHECK(blockedFor(limiter.tryAcquire("k"), 1ns));
    clock.set(11min);
    // The bucket carried over toward fewer admissions (docs/semantics.md, "Changing a limit"):
    // empty under the old limit when the block's last call converted it, so empty under the
    // new one too, a token coming 15 minutes after that call.
    const Decision after = limiter.tryAcquire("k");
    CHECK(!after.allowed);
    CHECK(after.retryAfter == 15min - 1ns);
}

TEST_CASE("Penalty: 8 threads on one penalized key admit exactly the limit", "[penalty]") {
    ManualClock clock;
    Penalized<TokenBucketModel> limiter(
        {Limit::perHour(1000).withBurst(500), Penalty{1000000, 1h, 1h}}, MemoryStorage{}, clock);
    CHECK(admittedFromThreads(8, 200, [&] { return limiter.tryAcquire("hot").allowed; }) == 500);
    // 1,100 refusals: strikes short of the million, so no block.
    CHECK(limiter.peek("hot", 0).allowed);
}

TEST_CASE("Penalty: a key pays for its penalty only in a penalized limiter", "[penalty]") {
    using Plain = TokenBucketModel::State;
    using WithPenalty = PenalizedModel<TokenBucketModel>::State;
    STATIC_REQUIRE(sizeof(WithPenalty) == sizeof(Plain) + 16);
    STATIC_REQUIRE(PenalizedModel<TokenBucketModel>::kName == "penalized_token_bucket");
}

TEST_CASE("Penalty: a bad penalty throws naming its field", "[penalty][config]") {
    const auto make = [](Penalty p) {
        Penalized<FixedWindowModel> unused({Limit::perMinute(1), p});
    };
    const auto fails = [&](Penalty p, const std::string& field) {
        try {
            make(p);
            FAIL("accepted " << field);
        } catch (const std::invalid_argument& e) {
            CHECK_THAT(e.what(), Catch::Matchers::Contains(field));
        }
    };
    fails(Penalty{0, 1min, 1min}, "Penalty.strikes");
    fails(Penalty{Limit::kMaxCount + 1, 1min, 1min}, "Penalty.strikes");
    fails(Penalty{1, 0ns, 1min}, "Penalty.within");
    fails(Penalty{1, 1min, -1s}, "Penalty.blockFor");
    fails(Penalty{1, 1min, 367 * 24h}, "Penalty.blockFor");
    using Spread = ratelimit::Limiter<PenalizedModel<FixedWindowModel>, MemoryStorage>;
    LimiterOptions spread;
    spread.spreadWindowResets = true;
    CHECK_THROWS_WITH(Spread({Limit::perMinute(1), Penalty{}}, MemoryStorage{}, {}, spread),
                      Catch::Matchers::Contains("spreadWindowResets"));
}

}  // namespace ratelimit_test
