// libFuzzer target: `Limit::parse` and the `Limit` factories on arbitrary input. Each either
// returns a valid `Limit` or throws `std::invalid_argument` (any other exception escapes and
// is a crash); the sanitizers catch undefined behaviour on the way.
//
// First byte < 128: the rest is text for `Limit::parse`; a parsed limit must be in range,
// parse back to itself from its canonical spelling, and give a limiter that either accepts
// a first request or refuses the quota at construction. Otherwise the rest is numbers for
// `Limit::per` (in several duration units), `perSecond`…`perDay`, `withBurst` and `validate`,
// which must throw exactly when docs/semantics.md's ranges say so.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ratio>
#include <stdexcept>
#include <string>
#include <string_view>

#include <ratelimit/clock.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/storage/memory.hpp>

#include "fuzz_support.hpp"

namespace {

using ratelimit::Limit;
using rlfuzz::Int128;

constexpr Int128 kMaxCount = Int128{1} << 48;
constexpr Int128 kInt64Max = std::numeric_limits<std::int64_t>::max();

bool validCount(Int128 n) { return n >= 1 && n <= kMaxCount; }

void checkInRange(const Limit& limit, const std::string& what) {
    if (!validCount(limit.count) || !validCount(limit.burst) || limit.period.count() < 1) {
        rlfuzz::fail(what + " returned a Limit out of range: count=" + std::to_string(limit.count) +
                     " period=" + std::to_string(limit.period.count()) +
                     "ns burst=" + std::to_string(limit.burst));
    }
}

/// Runs `make`; it must throw `std::invalid_argument` exactly when `valid` is false.
template <class F>
void expectValidity(bool valid, const std::string& what, F&& make) {
    bool threw = false;
    try {
        make();
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    if (threw == valid) {
        rlfuzz::fail(what + (valid ? " threw for valid input" : " accepted invalid input"));
    }
}

/// `Limit::parse(text)`, or nothing when it throws `std::invalid_argument`.
std::optional<Limit> parsed(std::string_view text) {
    try {
        return Limit::parse(text);
    } catch (const std::invalid_argument&) {
        return std::nullopt;
    }
}

void fuzzText(std::string_view text) {
    const std::optional<Limit> maybe = parsed(text);
    if (!maybe) {
        return;
    }
    const Limit limit = *maybe;
    const std::string quoted = "Limit::parse(\"" + std::string(text) + "\")";
    checkInRange(limit, quoted);

    const std::string canonical = std::to_string(limit.count) + "/" +
                                  std::to_string(limit.period.count()) + "ns burst " +
                                  std::to_string(limit.burst);
    const std::optional<Limit> again = parsed(canonical);
    if (!again) {
        rlfuzz::fail(quoted + " parsed, but its canonical form \"" + canonical + "\" does not");
    }
    if (!(*again == limit)) {
        rlfuzz::fail(quoted + " and \"" + canonical + "\" parse to different limits");
    }

    // A limiter takes it or refuses it at construction, naming why; a fresh key then admits one.
    ratelimit::ManualClock clock;
    try {
        ratelimit::TokenBucket<ratelimit::MemoryStorage, ratelimit::ManualClock> bucket{
            limit, ratelimit::MemoryStorage{{.maxKeys = 16, .spillEntries = 1, .seed = 1}}, clock};
        if (!bucket.tryAcquire("k").allowed) {
            rlfuzz::fail(quoted + ": a fresh token bucket refused one request");
        }
        ratelimit::SlidingCounter<ratelimit::MemoryStorage, ratelimit::ManualClock> counter{
            limit, ratelimit::MemoryStorage{{.maxKeys = 16, .spillEntries = 1, .seed = 1}}, clock};
        if (!counter.tryAcquire("k").allowed) {
            rlfuzz::fail(quoted + ": a fresh sliding counter refused one request");
        }
    } catch (const std::invalid_argument&) {
        // Not representable in memory: refused at construction, as docs/semantics.md says.
    }
}

/// `Limit::per(count, Duration{rep})`: valid when the duration is a whole number of
/// nanoseconds in 1 ns … 2^63 − 1 ns and count is in 1…2^48.
template <class Duration>
void fuzzPer(std::int64_t count, std::int64_t rep, const char* unit) {
    using Ratio = std::ratio_divide<typename Duration::period, std::nano>;
    const Int128 scaled = Int128{rep} * Ratio::num;
    const bool whole = scaled % Ratio::den == 0;
    const Int128 ns = scaled / Ratio::den;
    const bool valid = validCount(count) && whole && ns >= 1 && ns <= kInt64Max;
    const std::string what =
        "Limit::per(" + std::to_string(count) + ", " + std::to_string(rep) + unit + ")";
    expectValidity(valid, what, [&] {
        const Limit limit = Limit::per(count, Duration{rep});
        if (limit.count != count || limit.burst != count || Int128{limit.period.count()} != ns) {
            rlfuzz::fail(what + " returned other fields than it was given");
        }
    });
}

void fuzzNumbers(rlfuzz::ByteReader& in) {
    const std::uint8_t unit = in.byte();
    // Mostly small magnitudes around the range ends, sometimes any 64-bit value.
    const auto number = [&in]() -> std::int64_t {
        const std::uint8_t kind = in.byte();
        const auto raw = static_cast<std::int64_t>(in.u64());
        switch (kind % 4) {
            case 0:
                return raw;
            case 1:
                return (std::int64_t{1} << 48) + static_cast<std::int8_t>(kind);
            default:
                return static_cast<std::int8_t>(raw & 0xFF);
        }
    };
    const std::int64_t count = number();
    const std::int64_t rep = number();
    const std::int64_t burst = number();
    using ThirdNs = std::chrono::duration<std::int64_t, std::ratio<1, 3'000'000'000>>;
    using Days = std::chrono::duration<std::int64_t, std::ratio<86400>>;
    switch (unit % 9) {
        case 0:
            fuzzPer<std::chrono::nanoseconds>(count, rep, "ns");
            break;
        case 1:
            fuzzPer<std::chrono::microseconds>(count, rep, "us");
            break;
        case 2:
            fuzzPer<std::chrono::milliseconds>(count, rep, "ms");
            break;
        case 3:
            fuzzPer<std::chrono::seconds>(count, rep, "s");
            break;
        case 4:
            fuzzPer<std::chrono::minutes>(count, rep, "min");
            break;
        case 5:
            fuzzPer<std::chrono::hours>(count, rep, "h");
            break;
        case 6:
            fuzzPer<Days>(count, rep, "d");
            break;
        case 7:
            fuzzPer<ThirdNs>(count, rep, "/3 ns");
            break;
        default: {
            expectValidity(validCount(count), "Limit::perSecond…perDay", [&] {
                (void)Limit::perSecond(count);
                (void)Limit::perMinute(count);
                (void)Limit::perHour(count);
                (void)Limit::perDay(count);
            });
            break;
        }
    }
    // withBurst on a valid limit, and validate() on fields set by hand.
    expectValidity(validCount(burst), "withBurst(" + std::to_string(burst) + ")", [&] {
        const Limit limit = Limit::perSecond(1).withBurst(burst);
        if (limit.burst != burst) {
            rlfuzz::fail("withBurst returned another burst than it was given");
        }
    });
    Limit byHand = Limit::perSecond(1);
    byHand.count = count;
    byHand.period = std::chrono::nanoseconds{rep};
    byHand.burst = burst;
    expectValidity(validCount(count) && validCount(burst) && rep >= 1, "Limit::validate",
                   [&] { byHand.validate(); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    rlfuzz::ByteReader in(data, size);
    if (size == 0) {
        return 0;
    }
    if (in.byte() < 128) {
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): bytes as text
        fuzzText(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
    } else {
        fuzzNumbers(in);
    }
    return 0;
}
