// Tests of ratelimit::Limit (include/ratelimit/limit.hpp): factories, validation, parsing.

#include <chrono>
#include <cstdint>
#include <limits>
#include <ratio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>

#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Limit;
using ratelimit_test::Contains;
using ratelimit_test::StartsWith;

constexpr std::int64_t kMax = std::int64_t{1} << 48;

// Constant evaluation: a valid Limit is a constant; an invalid one is not (its throw cannot be
// evaluated), which a requires-expression observes without breaking the build.
template <std::int64_t Count, std::int64_t Burst = Count>
constexpr bool constantLimitMs() {
    return requires {
        typename std::integral_constant<
            std::int64_t,
            Limit::per(Count, std::chrono::milliseconds{1500}).withBurst(Burst).count>;
    };
}

template <std::int64_t PeriodNs>
constexpr bool constantPeriodNs() {
    return requires {
        typename std::integral_constant<std::int64_t,
                                        Limit::per(5, std::chrono::nanoseconds{PeriodNs}).count>;
    };
}

template <std::int64_t Count>
constexpr bool constantPerSecond() {
    return requires {
        typename std::integral_constant<std::int64_t, Limit::perSecond(Count).count>;
    };
}

template <std::int64_t Count>
constexpr bool constantPerMinute() {
    return requires {
        typename std::integral_constant<std::int64_t, Limit::perMinute(Count).count>;
    };
}

template <std::int64_t Count>
constexpr bool constantPer90Seconds() {
    return requires {
        typename std::integral_constant<std::int64_t,
                                        Limit::per(Count, std::chrono::seconds{90}).count>;
    };
}

/// A valid Limit with one field overwritten (the fields are public).
Limit withField(const std::string& field, std::int64_t value) {
    Limit limit = Limit::perSecond(5);
    if (field == "count") {
        limit.count = value;
    } else if (field == "burst") {
        limit.burst = value;
    } else {
        limit.period = std::chrono::nanoseconds{value};
    }
    return limit;
}

/// The limiter `L` refuses a Limit whose `field` is `value`: std::invalid_argument naming it.
template <class L>
void requireRefuses(const char* algorithm, const std::string& field, std::int64_t value) {
    const Limit limit = withField(field, value);
    INFO(algorithm << " with Limit." << field << " = " << value);
    CHECK_THROWS_AS(L{limit}, std::invalid_argument);
    CHECK_THROWS_WITH(L{limit}, Contains(field));
}

void requireEveryLimiterRefuses(const std::string& field, std::int64_t value) {
    using ratelimit::ManualClock;
    using ratelimit::MemoryStorage;
    requireRefuses<ratelimit::TokenBucket<MemoryStorage, ManualClock>>("TokenBucket", field, value);
    requireRefuses<ratelimit::LeakyBucket<MemoryStorage, ManualClock>>("LeakyBucket", field, value);
    requireRefuses<ratelimit::FixedWindow<MemoryStorage, ManualClock>>("FixedWindow", field, value);
    requireRefuses<ratelimit::SlidingLog<MemoryStorage, ManualClock>>("SlidingLog", field, value);
    requireRefuses<ratelimit::SlidingCounter<MemoryStorage, ManualClock>>("SlidingCounter", field,
                                                                          value);
}

}  // namespace

TEST_CASE("Limit: factories set count, period and burst", "[limit]") {
    const Limit a = Limit::per(10, 90s);
    CHECK(a.count == 10);
    CHECK(a.period == 90s);
    CHECK(a.burst == 10);
    CHECK(Limit::perSecond(5).period == 1s);
    CHECK(Limit::perMinute(5).period == 1min);
    CHECK(Limit::perHour(5).period == 1h);
    CHECK(Limit::perDay(5).period == 24h);
    CHECK(Limit::perDay(5).count == 5);
    CHECK(Limit::perDay(5).burst == 5);
    CHECK(Limit::per(3, 1500ms).period == 1500ms);
    CHECK(Limit::per(3, 7us).period == 7us);
    CHECK(Limit::per(3, 1ns).period == 1ns);
    CHECK(Limit::per(3, std::chrono::duration<std::int32_t, std::ratio<3600>>{2}).period == 2h);
    CHECK(Limit::per(3, std::chrono::duration<std::int64_t, std::ratio<1, 4>>{3}).period == 750ms);
}

TEST_CASE("Limit: withBurst changes only the burst", "[limit]") {
    const Limit base = Limit::perMinute(10);
    const Limit below = base.withBurst(3);
    const Limit above = base.withBurst(25);
    CHECK(below.count == 10);
    CHECK(below.period == 1min);
    CHECK(below.burst == 3);
    CHECK(above.burst == 25);
    CHECK(base.burst == 10);  // the original is untouched
    CHECK(base.withBurst(10) == base);
    CHECK(below != base);
    CHECK(below.withBurst(10) == base);
}

TEST_CASE("Limit: the factories are constant expressions", "[limit]") {
    constexpr Limit kLimit = Limit::per(5, 1500ms).withBurst(20);
    static_assert(kLimit.count == 5);
    static_assert(kLimit.period == 1500ms);
    static_assert(kLimit.burst == 20);
    static_assert(kLimit == Limit::per(5, 1500ms).withBurst(20));
    STATIC_REQUIRE(Limit::per(kMax, 1ns).withBurst(kMax).burst == kMax);

    // Misuse in a constant expression does not compile.
    STATIC_REQUIRE(constantLimitMs<5>());
    STATIC_REQUIRE(constantLimitMs<kMax, kMax>());
    STATIC_REQUIRE_FALSE(constantLimitMs<0>());
    STATIC_REQUIRE_FALSE(constantLimitMs<-1>());
    STATIC_REQUIRE_FALSE(constantLimitMs<kMax + 1>());
    STATIC_REQUIRE_FALSE(constantLimitMs<5, 0>());
    STATIC_REQUIRE_FALSE(constantLimitMs<5, kMax + 1>());
    STATIC_REQUIRE(constantPeriodNs<1>());
    STATIC_REQUIRE_FALSE(constantPeriodNs<0>());
    STATIC_REQUIRE_FALSE(constantPeriodNs<-5>());

    // The named factories and whole-second periods too. (Checked at run time so that a compiler
    // that cannot evaluate them fails this test, not the build.)
    CHECK(constantPerSecond<5>());
    CHECK(constantPerMinute<5>());
    CHECK(constantPer90Seconds<5>());
    CHECK_FALSE(constantPerSecond<0>());
}

TEST_CASE("Limit: count, burst and period outside their range throw, naming the field", "[limit]") {
    SECTION("count") {
        for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, kMax + 1,
                                       std::numeric_limits<std::int64_t>::min()}) {
            CHECK_THROWS_AS(Limit::per(bad, 1s), std::invalid_argument);
            CHECK_THROWS_WITH(Limit::per(bad, 1s), Contains("count"));
            CHECK_THROWS_WITH(Limit::per(bad, 1s), Contains(std::to_string(bad)));
            CHECK_THROWS_WITH(Limit::per(bad, 1s), !Contains("burst"));
            CHECK_THROWS_AS(Limit::perSecond(bad), std::invalid_argument);
            CHECK_THROWS_AS(Limit::perMinute(bad), std::invalid_argument);
            CHECK_THROWS_AS(Limit::perHour(bad), std::invalid_argument);
            CHECK_THROWS_AS(Limit::perDay(bad), std::invalid_argument);
        }
        CHECK(Limit::per(kMax, 1s).count == kMax);
        CHECK(Limit::per(1, 1s).count == 1);
    }
    SECTION("burst") {
        for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, kMax + 1}) {
            CHECK_THROWS_AS(Limit::perSecond(5).withBurst(bad), std::invalid_argument);
            CHECK_THROWS_WITH(Limit::perSecond(5).withBurst(bad), Contains("burst"));
            CHECK_THROWS_WITH(Limit::perSecond(5).withBurst(bad), Contains(std::to_string(bad)));
        }
        CHECK(Limit::perSecond(5).withBurst(kMax).burst == kMax);
        CHECK(Limit::perSecond(5).withBurst(1).burst == 1);
    }
    SECTION("period") {
        for (const std::chrono::nanoseconds bad : {0ns, -1ns, std::chrono::nanoseconds{-1h}}) {
            CHECK_THROWS_AS(Limit::per(5, bad), std::invalid_argument);
            CHECK_THROWS_WITH(Limit::per(5, bad), Contains("period"));
            CHECK_THROWS_WITH(Limit::per(5, bad), Contains(std::to_string(bad.count())));
        }
        CHECK_THROWS_AS(Limit::per(5, -3s), std::invalid_argument);
        CHECK_THROWS_WITH(Limit::per(5, -3s), Contains("period"));
        CHECK_THROWS_AS(Limit::per(5, 0s), std::invalid_argument);
        CHECK_THROWS_WITH(Limit::per(5, 0s), Contains("period"));
        CHECK(Limit::per(5, 1ns).period == 1ns);
    }
    SECTION("a period that is not whole nanoseconds, or too long for them") {
        using Thirds = std::chrono::duration<std::int64_t, std::ratio<1, 3>>;
        CHECK_THROWS_AS(Limit::per(5, Thirds{1}), std::invalid_argument);
        CHECK_THROWS_WITH(Limit::per(5, Thirds{1}), Contains("period"));
        CHECK(Limit::per(5, Thirds{3}).period == 1s);
        using Picos = std::chrono::duration<std::int64_t, std::pico>;
        CHECK_THROWS_AS(Limit::per(5, Picos{1500}), std::invalid_argument);
        CHECK_THROWS_WITH(Limit::per(5, Picos{1500}), Contains("period"));
        CHECK(Limit::per(5, Picos{2000}).period == 2ns);
        CHECK_THROWS_AS(Limit::per(5, std::chrono::hours{3'000'000}), std::invalid_argument);
        CHECK_THROWS_WITH(Limit::per(5, std::chrono::hours{3'000'000}), Contains("period"));
        CHECK(Limit::per(5, std::chrono::nanoseconds::max()).period ==
              std::chrono::nanoseconds::max());
    }
    SECTION("every message starts with the library's name") {
        CHECK_THROWS_AS(Limit::per(0, 1s), std::invalid_argument);
        CHECK_THROWS_WITH(Limit::per(0, 1s), StartsWith("ratelimit: "));
    }
}

TEST_CASE("Limit::parse: accepted forms", "[limit]") {
    CHECK(Limit::parse("10/min") == Limit::perMinute(10));
    CHECK(Limit::parse("100/s burst 20") == Limit::perSecond(100).withBurst(20));
    CHECK(Limit::parse("5/90s") == Limit::per(5, 90s));
    CHECK(Limit::parse(" 10 / 90 seconds ") == Limit::per(10, 90s));
    CHECK(Limit::parse("\t7/s\t") == Limit::perSecond(7));
    CHECK(Limit::parse("3 / 10 s burst 1") == Limit::per(3, 10s).withBurst(1));
    CHECK(Limit::parse("999999/h") == Limit::perHour(999'999));
    CHECK(Limit::parse("281474976710656/ns burst 281474976710656") ==
          Limit::per(kMax, 1ns).withBurst(kMax));
    CHECK(Limit::parse("0010/0090s") == Limit::per(10, 90s));
    SECTION("every unit") {
        CHECK(Limit::parse("1/ns").period == 1ns);
        CHECK(Limit::parse("1/us").period == 1us);
        CHECK(Limit::parse("1/ms").period == 1ms);
        CHECK(Limit::parse("1/s").period == 1s);
        CHECK(Limit::parse("1/m").period == 1min);
        CHECK(Limit::parse("1/min").period == 1min);
        CHECK(Limit::parse("1/h").period == 1h);
        CHECK(Limit::parse("1/d").period == 24h);
        CHECK(Limit::parse("1/sec").period == 1s);
        CHECK(Limit::parse("1/second").period == 1s);
        CHECK(Limit::parse("1/minutes").period == 1min);
        CHECK(Limit::parse("1/hour").period == 1h);
        CHECK(Limit::parse("1/days").period == 24h);
        CHECK(Limit::parse("1/250ms").period == 250ms);
        CHECK(Limit::parse("1/3d").period == 72h);
    }
    SECTION("case-insensitive") {
        CHECK(Limit::parse("10/MIN") == Limit::perMinute(10));
        CHECK(Limit::parse("10/Min") == Limit::perMinute(10));
        CHECK(Limit::parse("100/S BURST 20") == Limit::perSecond(100).withBurst(20));
        CHECK(Limit::parse("1/MS").period == 1ms);
        CHECK(Limit::parse("1/M").period == 1min);
        CHECK(Limit::parse("1/H").period == 1h);
        CHECK(Limit::parse("1/D").period == 24h);
        CHECK(Limit::parse("1/Ns").period == 1ns);
        CHECK(Limit::parse("1/uS").period == 1us);
        CHECK(Limit::parse("5/90 Seconds Burst 9") == Limit::per(5, 90s).withBurst(9));
    }
}

TEST_CASE("Limit::parse: rejected forms say what is wrong", "[limit]") {
    // `text` is refused with std::invalid_argument, and its message holds `part`.
    const auto rejects = [](std::string_view text, const auto& matcher) {
        INFO("Limit::parse(\"" << text << "\")");
        CHECK_THROWS_AS(Limit::parse(text), std::invalid_argument);
        CHECK_THROWS_WITH(Limit::parse(text), matcher);
    };
    SECTION("unknown unit") {
        rejects("10/fortnight", Contains("unknown time unit"));
        rejects("10/fortnight", Contains("fortnight"));
        rejects("10/fortnight", Contains("10/fortnight"));
        rejects("10/mins", Contains("unknown time unit 'mins'"));
        rejects("10/msec", Contains("unknown time unit"));
        rejects("10/µs", Contains("time unit"));
    }
    SECTION("missing unit") {
        rejects("10/", Contains("expected a time unit"));
        rejects("10/90", Contains("expected a time unit"));
        rejects("10/90 burst 3", Contains("time unit"));
        rejects("10", Contains("expected '/'"));
        rejects("10 per min", Contains("expected '/'"));
    }
    SECTION("fraction") {
        rejects("1.5/s", Contains("count must be a whole number"));
        rejects("1000/1.5h", Contains("period must be a whole number"));
        rejects("10/s burst 2.5", Contains("burst must be a whole number"));
        rejects("1,5/s", Contains("whole number"));
    }
    SECTION("negative or missing numbers") {
        rejects("-1/s", Contains("count"));
        rejects("/s", Contains("count"));
        rejects("10/-5s", Contains("time unit"));
        rejects("10/s burst", Contains("burst"));
        rejects("10/s burst -1", Contains("burst"));
    }
    SECTION("overflow and out-of-range values") {
        rejects("9223372036854775808/s", Contains("count is too large"));
        rejects("99999999999999999999999/s", Contains("too large"));
        rejects("1/9223372036854775808ns", Contains("period is too large"));
        rejects("1/106752d", Contains("period is too long"));
        rejects("1/9223372036854775807ms", Contains("too long"));
        rejects("10/s burst 9223372036854775808", Contains("burst is too large"));
        // In range for the parser, out of range for a Limit: the field is named.
        rejects("281474976710657/s", Contains("count"));
        rejects("0/s", Contains("count"));
        rejects("10/0s", Contains("period"));
        rejects("10/s burst 0", Contains("burst"));
        rejects("10/s burst 281474976710657", Contains("burst"));
    }
    SECTION("trailing junk") {
        rejects("10/min x", Contains("burst"));
        rejects("10/min burst 5 x", Contains("unexpected text"));
        rejects("10/min burst 5 burst 6", Contains("unexpected text"));
        // Junk where "burst" or the end could follow: the offset points at it.
        rejects("10/min;", Contains("offset 6"));
        rejects("10/min x", Contains("offset 7"));
        rejects("10/min\n", Contains("offset 6"));
        rejects("10/min burst5x", Contains("unexpected"));
    }
    SECTION("empty string") {
        rejects("", Contains("expected a whole number for count"));
        rejects("   ", Contains("count"));
    }
    SECTION("messages name the input and the offset") {
        rejects("10/fortnight", StartsWith("ratelimit: "));
        rejects("10/fortnight", Contains("offset 3"));
        rejects("10/min burst 5 x", Contains("offset 15"));
    }
}

TEST_CASE("Limit::parse: text with an embedded NUL is rejected", "[limit]") {
    using namespace std::string_view_literals;
    CHECK_THROWS_AS(Limit::parse("10/min\0"sv), std::invalid_argument);
    CHECK_THROWS_AS(Limit::parse("10\0/min"sv), std::invalid_argument);
    CHECK_THROWS_AS(Limit::parse("\0"sv), std::invalid_argument);
    // The view's length counts, not a terminator.
    CHECK(Limit::parse(std::string_view("10/min burst 3 trailing", 14)) ==
          Limit::perMinute(10).withBurst(3));
}

TEST_CASE("Limit: a limiter refuses a Limit made invalid through its public fields", "[limit]") {
    // The fields are public, so a Limit can leave the factories' checks behind; the limiter's
    // constructor is where bad configuration must still throw (docs/semantics.md: "Bad
    // configuration throws at construction", std::invalid_argument naming the field).
    requireEveryLimiterRefuses("count", 0);  // used to divide by zero (SIGFPE) in the buckets
    requireEveryLimiterRefuses("count", -1);
    requireEveryLimiterRefuses("count", kMax + 1);
    requireEveryLimiterRefuses("burst", 0);
    requireEveryLimiterRefuses("burst", -3);
    requireEveryLimiterRefuses("burst", kMax + 1);
    requireEveryLimiterRefuses("period", 0);   // used to divide by zero (SIGFPE)
    requireEveryLimiterRefuses("period", -1);  // used to divide by zero in the sliding counter
}
