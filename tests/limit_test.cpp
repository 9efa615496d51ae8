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

constexpr std::int64_t kMax = std::int64_t{1} << 48;

/// The message of the std::invalid_argument `f` throws, or a note saying it threw none.
template <class F>
std::string invalidArgumentMessage(F&& f) {
    try {
        (void)f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "<no std::invalid_argument thrown>";
}

bool contains(std::string_view text, std::string_view part) {
    return text.find(part) != std::string_view::npos;
}

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

/// Builds every public limiter over `limit` and collects, per algorithm, the message of the
/// std::invalid_argument its constructor throws (or a note that it threw none).
std::vector<std::pair<std::string, std::string>> constructEveryLimiter(const Limit& limit) {
    using ratelimit::ManualClock;
    using ratelimit::MemoryStorage;
    std::vector<std::pair<std::string, std::string>> out;
    const auto attempt = [&](const char* name, auto make) {
        out.emplace_back(name, invalidArgumentMessage([&] {
                             (void)make();
                             return 0;
                         }));
    };
    attempt("TokenBucket",
            [&] { return ratelimit::TokenBucket<MemoryStorage, ManualClock>{limit}; });
    attempt("LeakyBucket",
            [&] { return ratelimit::LeakyBucket<MemoryStorage, ManualClock>{limit}; });
    attempt("FixedWindow",
            [&] { return ratelimit::FixedWindow<MemoryStorage, ManualClock>{limit}; });
    attempt("SlidingLog", [&] { return ratelimit::SlidingLog<MemoryStorage, ManualClock>{limit}; });
    attempt("SlidingCounter",
            [&] { return ratelimit::SlidingCounter<MemoryStorage, ManualClock>{limit}; });
    return out;
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

void requireEveryLimiterRefuses(const std::string& field, std::int64_t value) {
    for (const auto& [algorithm, what] : constructEveryLimiter(withField(field, value))) {
        INFO(algorithm << " with Limit." << field << " = " << value << ": " << what);
        CHECK(contains(what, field));
        CHECK_FALSE(contains(what, "<no std::invalid_argument thrown>"));
    }
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
            const std::string what = invalidArgumentMessage([&] { return Limit::per(bad, 1s); });
            INFO(what);
            CHECK(contains(what, "count"));
            CHECK(contains(what, std::to_string(bad)));
            CHECK_FALSE(contains(what, "burst"));
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
            const std::string what =
                invalidArgumentMessage([&] { return Limit::perSecond(5).withBurst(bad); });
            INFO(what);
            CHECK(contains(what, "burst"));
            CHECK(contains(what, std::to_string(bad)));
        }
        CHECK(Limit::perSecond(5).withBurst(kMax).burst == kMax);
        CHECK(Limit::perSecond(5).withBurst(1).burst == 1);
    }
    SECTION("period") {
        for (const std::chrono::nanoseconds bad : {0ns, -1ns, std::chrono::nanoseconds{-1h}}) {
            const std::string what = invalidArgumentMessage([&] { return Limit::per(5, bad); });
            INFO(what);
            CHECK(contains(what, "period"));
            CHECK(contains(what, std::to_string(bad.count())));
        }
        CHECK(contains(invalidArgumentMessage([] { return Limit::per(5, -3s); }), "period"));
        CHECK(contains(invalidArgumentMessage([] { return Limit::per(5, 0s); }), "period"));
        CHECK(Limit::per(5, 1ns).period == 1ns);
    }
    SECTION("a period that is not whole nanoseconds, or too long for them") {
        using Thirds = std::chrono::duration<std::int64_t, std::ratio<1, 3>>;
        CHECK(contains(invalidArgumentMessage([] { return Limit::per(5, Thirds{1}); }), "period"));
        CHECK(Limit::per(5, Thirds{3}).period == 1s);
        using Picos = std::chrono::duration<std::int64_t, std::pico>;
        CHECK(
            contains(invalidArgumentMessage([] { return Limit::per(5, Picos{1500}); }), "period"));
        CHECK(Limit::per(5, Picos{2000}).period == 2ns);
        const std::string tooLong =
            invalidArgumentMessage([] { return Limit::per(5, std::chrono::hours{3'000'000}); });
        INFO(tooLong);
        CHECK(contains(tooLong, "period"));
        CHECK(Limit::per(5, std::chrono::nanoseconds::max()).period ==
              std::chrono::nanoseconds::max());
    }
    SECTION("every message starts with the library's name") {
        CHECK(invalidArgumentMessage([] { return Limit::per(0, 1s); }).rfind("ratelimit: ", 0) ==
              0);
    }
}

TEST_CASE("Limit::parse: accepted forms", "[limit][parse]") {
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

TEST_CASE("Limit::parse: rejected forms say what is wrong", "[limit][parse]") {
    const auto message = [](std::string_view text) {
        return invalidArgumentMessage([&] { return Limit::parse(text); });
    };
    SECTION("unknown unit") {
        const std::string what = message("10/fortnight");
        INFO(what);
        CHECK(contains(what, "unknown time unit"));
        CHECK(contains(what, "fortnight"));
        CHECK(contains(what, "10/fortnight"));
        CHECK(contains(message("10/mins"), "unknown time unit 'mins'"));
        CHECK(contains(message("10/msec"), "unknown time unit"));
        CHECK(contains(message("10/µs"), "time unit"));
    }
    SECTION("missing unit") {
        CHECK(contains(message("10/"), "expected a time unit"));
        CHECK(contains(message("10/90"), "expected a time unit"));
        CHECK(contains(message("10/90 burst 3"), "time unit"));
        CHECK(contains(message("10"), "expected '/'"));
        CHECK(contains(message("10 per min"), "expected '/'"));
    }
    SECTION("fraction") {
        CHECK(contains(message("1.5/s"), "count must be a whole number"));
        CHECK(contains(message("1000/1.5h"), "period must be a whole number"));
        CHECK(contains(message("10/s burst 2.5"), "burst must be a whole number"));
        CHECK(contains(message("1,5/s"), "whole number"));
    }
    SECTION("negative or missing numbers") {
        CHECK(contains(message("-1/s"), "count"));
        CHECK(contains(message("/s"), "count"));
        CHECK(contains(message("10/-5s"), "time unit"));
        CHECK(contains(message("10/s burst"), "burst"));
        CHECK(contains(message("10/s burst -1"), "burst"));
    }
    SECTION("overflow and out-of-range values") {
        CHECK(contains(message("9223372036854775808/s"), "count is too large"));
        CHECK(contains(message("99999999999999999999999/s"), "too large"));
        CHECK(contains(message("1/9223372036854775808ns"), "period is too large"));
        CHECK(contains(message("1/106752d"), "period is too long"));
        CHECK(contains(message("1/9223372036854775807ms"), "too long"));
        CHECK(contains(message("10/s burst 9223372036854775808"), "burst is too large"));
        // In range for the parser, out of range for a Limit: the field is named.
        CHECK(contains(message("281474976710657/s"), "count"));
        CHECK(contains(message("0/s"), "count"));
        CHECK(contains(message("10/0s"), "period"));
        CHECK(contains(message("10/s burst 0"), "burst"));
        CHECK(contains(message("10/s burst 281474976710657"), "burst"));
    }
    SECTION("trailing junk") {
        CHECK(contains(message("10/min x"), "burst"));
        CHECK(contains(message("10/min burst 5 x"), "unexpected text"));
        CHECK(contains(message("10/min burst 5 burst 6"), "unexpected text"));
        // Junk where "burst" or the end could follow: the offset points at it.
        CHECK(contains(message("10/min;"), "offset 6"));
        CHECK(contains(message("10/min x"), "offset 7"));
        CHECK(contains(message("10/min\n"), "offset 6"));
        CHECK(contains(message("10/min burst5x"), "unexpected"));
    }
    SECTION("empty string") {
        const std::string what = message("");
        INFO(what);
        CHECK(contains(what, "expected a whole number for count"));
        CHECK(contains(message("   "), "count"));
    }
    SECTION("messages name the input and the offset") {
        const std::string what = message("10/fortnight");
        CHECK(what.rfind("ratelimit: ", 0) == 0);
        CHECK(contains(what, "offset 3"));
        CHECK(contains(message("10/min burst 5 x"), "offset 15"));
    }
}

TEST_CASE("Limit::parse: text with an embedded NUL is rejected", "[limit][parse]") {
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
    // constructor is where bad configuration must still throw (DESIGN.md: "Bad configuration
    // throws at construction", std::invalid_argument naming the field).
    requireEveryLimiterRefuses("count", 0);  // used to divide by zero (SIGFPE) in the buckets
    requireEveryLimiterRefuses("count", -1);
    requireEveryLimiterRefuses("count", kMax + 1);
    requireEveryLimiterRefuses("burst", 0);
    requireEveryLimiterRefuses("burst", -3);
    requireEveryLimiterRefuses("burst", kMax + 1);
    requireEveryLimiterRefuses("period", 0);   // used to divide by zero (SIGFPE)
    requireEveryLimiterRefuses("period", -1);  // used to divide by zero in the sliding counter
}
