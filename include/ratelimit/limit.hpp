#pragma once

#include <cstdint>
#include <ratio>
#include <string>
#include <string_view>
#include <type_traits>

#include <ratelimit/detail/ascii.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/throw.hpp>

namespace ratelimit {
inline namespace v1 {

namespace detail {

/// `d` in nanoseconds, exactly. Defined before `Limit` so its factories are constant
/// expressions for every compiler. Throws: `std::invalid_argument` when `d` is not a whole
/// number of nanoseconds or does not fit.
template <class Rep, class Period>
constexpr std::chrono::nanoseconds toNanoseconds(std::chrono::duration<Rep, Period> d) {
    using Ratio = std::ratio_divide<Period, std::nano>;
    const Int128 scaled = static_cast<Int128>(d.count()) * Ratio::num;
    if (scaled % Ratio::den != 0) {
        throwInvalidArgument("Limit.period must be a whole number of nanoseconds");
    }
    if (scaled / Ratio::den > kInt64Max) {
        throwInvalidArgument("Limit.period is too long (above 2^63 ns, 292 years)");
    }
    if (scaled / Ratio::den < kInt64Min) {  // narrowed, it would wrap to a positive period
        throwInvalidArgument("Limit.period must be at least 1ns (got one below -2^63 ns)");
    }
    return std::chrono::nanoseconds{static_cast<std::int64_t>(scaled / Ratio::den)};
}

}  // namespace detail

/// The rule: `count` requests per `period`, with an optional `burst` (bucket capacity).
///
/// One type for every algorithm, so switching algorithm never means rewriting configuration.
/// The window algorithms ignore `burst`; the buckets use it as their capacity (default:
/// `count`; it may be below `count`).
///
/// Throws: `std::invalid_argument` naming the field when `count` or `burst` is outside
/// 1…2^48 or `period` is below 1 ns. In a constant expression the same mistake does not
/// compile.
/// Thread safety: thread-compatible value type.
struct Limit {
    /// Largest accepted `count` and `burst`: 2^48 keeps every product with a span in 128 bits
    /// and every Redis operand below 2^53.
    static constexpr std::int64_t kMaxCount = std::int64_t{1} << 48;

    std::int64_t count = 1;
    std::chrono::nanoseconds period{std::chrono::seconds{1}};
    std::int64_t burst = 1;

    /// `count` per `period`, burst = count. `period` may be any duration with an integral
    /// rep; it is converted to nanoseconds exactly.
    template <class Rep, class Period>
    static constexpr Limit per(std::int64_t count, std::chrono::duration<Rep, Period> period) {
        static_assert(std::is_integral_v<Rep>,
                      "ratelimit::Limit::per needs an integral duration (e.g. 90s or 1500ms), "
                      "so the rate stays an exact rational");
        return Limit{count, detail::toNanoseconds(period), count, Checked{}};
    }
    static constexpr Limit perSecond(std::int64_t count) {
        return per(count, std::chrono::seconds{1});
    }
    static constexpr Limit perMinute(std::int64_t count) {
        return per(count, std::chrono::minutes{1});
    }
    static constexpr Limit perHour(std::int64_t count) { return per(count, std::chrono::hours{1}); }
    static constexpr Limit perDay(std::int64_t count) { return per(count, std::chrono::hours{24}); }

    /// The same rule with another bucket capacity.
    [[nodiscard]] constexpr Limit withBurst(std::int64_t newBurst) const {
        return Limit{count, period, newBurst, Checked{}};
    }

    /// Parses `"<count>/<period>[ burst <n>]"`: `10/min`, `100/s burst 20`, `5/90s`,
    /// `1000/1.5h` is rejected (integral periods only). Units: ns, us, ms, s, m/min, h, d and
    /// their long forms (sec, second(s), minute(s), hour(s), day(s)); case-insensitive;
    /// spaces around tokens are allowed.
    /// Throws: `std::invalid_argument` saying what is wrong and where.
    static Limit parse(std::string_view text);

    friend constexpr bool operator==(const Limit&, const Limit&) = default;

    /// Checks the fields again (they are public, so a `Limit` may have been changed after it
    /// was made). Throws: `std::invalid_argument` naming the field and the value.
    constexpr void validate() const {
        if (count < 1 || count > kMaxCount) {
            detail::throwInvalidArgument("Limit.count must be in 1..2^48 (got {})", {count});
        }
        if (burst < 1 || burst > kMaxCount) {
            detail::throwInvalidArgument("Limit.burst must be in 1..2^48 (got {})", {burst});
        }
        if (period.count() < 1) {
            detail::throwInvalidArgument("Limit.period must be at least 1ns (got {}ns)",
                                         {period.count()});
        }
    }

private:
    struct Checked {};
    constexpr Limit(std::int64_t countIn, std::chrono::nanoseconds periodIn, std::int64_t burstIn,
                    Checked /*validated*/)
        : count(countIn), period(periodIn), burst(burstIn) {
        validate();
    }
};

namespace detail {

/// A small cursor over `Limit::parse` input; errors say what was expected and where.
class LimitParser {
public:
    explicit LimitParser(std::string_view text) : text_(text) {}

    Limit parse() {
        skipSpaces();
        const std::int64_t count = number("count");
        skipSpaces();
        expect('/');
        skipSpaces();
        const std::int64_t multiple = atDigit() ? number("period") : 1;
        skipSpaces();
        const std::chrono::nanoseconds unit = this->unit();
        std::int64_t periodNs = 0;
        if (__builtin_mul_overflow(multiple, unit.count(), &periodNs)) {
            fail("the period is too long (above 2^63 ns)");
        }
        Limit limit = Limit::per(count, std::chrono::nanoseconds{periodNs});
        skipSpaces();
        if (pos_ < text_.size()) {
            word("burst");
            skipSpaces();
            limit = limit.withBurst(number("burst"));
            skipSpaces();
        }
        if (pos_ != text_.size()) {
            fail("unexpected text");
        }
        return limit;
    }

private:
    [[noreturn]] void fail(std::string_view what) const {
        throwInvalidArgument(std::string("Limit::parse(\"")
                                 .append(text_)
                                 .append("\"): ")
                                 .append(what)
                                 .append(" at offset ")
                                 .append(std::to_string(pos_)));
    }

    [[nodiscard]] bool atDigit() const {
        return pos_ < text_.size() && ascii::isDigit(text_[pos_]);
    }

    void skipSpaces() {
        while (pos_ < text_.size() && ascii::isBlank(text_[pos_])) {
            ++pos_;
        }
    }

    void expect(char c) {
        if (pos_ >= text_.size() || text_[pos_] != c) {
            fail(std::string("expected '") + c + "'");
        }
        ++pos_;
    }

    std::int64_t number(std::string_view field) {
        if (!atDigit()) {
            fail(std::string("expected a whole number for ").append(field));
        }
        std::int64_t value = 0;
        while (atDigit()) {
            const std::int64_t digit = text_[pos_] - '0';
            if (__builtin_mul_overflow(value, std::int64_t{10}, &value) ||
                __builtin_add_overflow(value, digit, &value)) {
                fail(std::string("the ").append(field).append(" is too large"));
            }
            ++pos_;
        }
        if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == ',')) {
            fail(std::string("the ").append(field).append(" must be a whole number"));
        }
        return value;
    }

    std::string letters() {
        std::string out;
        while (pos_ < text_.size() && ascii::isAlpha(text_[pos_])) {
            out.push_back(ascii::toLower(text_[pos_++]));
        }
        return out;
    }

    void word(std::string_view expected) {
        const std::size_t start = pos_;
        if (letters() != expected) {
            pos_ = start;
            fail(std::string("expected '").append(expected).append("'"));
        }
    }

    std::chrono::nanoseconds unit() {
        using namespace std::chrono_literals;
        const std::size_t start = pos_;
        const std::string u = letters();
        if (u == "ns" || u == "nanosecond" || u == "nanoseconds") {
            return 1ns;
        }
        if (u == "us" || u == "microsecond" || u == "microseconds") {
            return 1us;
        }
        if (u == "ms" || u == "millisecond" || u == "milliseconds") {
            return 1ms;
        }
        if (u == "s" || u == "sec" || u == "second" || u == "seconds") {
            return 1s;
        }
        if (u == "m" || u == "min" || u == "minute" || u == "minutes") {
            return 1min;
        }
        if (u == "h" || u == "hr" || u == "hour" || u == "hours") {
            return 1h;
        }
        if (u == "d" || u == "day" || u == "days") {
            return 24h;
        }
        pos_ = start;
        fail(u.empty() ? "expected a time unit (ns, us, ms, s, min, h, d)"
                       : "unknown time unit '" + u + "' (use ns, us, ms, s, min, h, d)");
    }

    std::string_view text_;
    std::size_t pos_ = 0;
};

}  // namespace detail

inline Limit Limit::parse(std::string_view text) { return detail::LimitParser(text).parse(); }

}  // namespace v1
}  // namespace ratelimit
