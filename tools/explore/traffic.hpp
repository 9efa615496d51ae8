#pragma once

// The explorer's input: a traffic pattern (requests at times, per key, with a cost) read from
// inline text, from a CSV file or from a generator. Everything here validates completely and
// throws `explore::InputError` with the place (line, item or option) and the reason, so the
// explorer can refuse bad input before it prints anything.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/detail/ascii.hpp>
#include <ratelimit/limit.hpp>

namespace explore {

using Nanos = std::chrono::nanoseconds;

/// Bad input from the user: the message says where and what, ready to print.
class InputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(std::string_view where, std::string_view what) {
    throw InputError(std::string(where).append(": ").append(what));
}

/// One request of the traffic: at `at` (from the replay's zero, where windows start), for the
/// key `keys[key]` of its `Traffic`, costing `cost` units.
struct Request {
    Nanos at{0};
    std::uint32_t key = 0;
    std::int64_t cost = 1;
};

/// Requests in time order (equal times keep their input order) and the keys they name.
struct Traffic {
    std::vector<std::string> keys;
    std::vector<Request> requests;
};

/// The most requests the explorer replays; each is stepped through five limiters twice.
inline constexpr std::size_t kMaxRequests = 1'000'000;
/// Costs and counts follow `Limit`'s range.
inline constexpr std::int64_t kMaxCount = ratelimit::Limit::kMaxCount;

/// The key inline traffic and the generators use.
inline constexpr std::string_view kDefaultKey = "client";

namespace detail {

namespace ascii = ratelimit::detail::ascii;

/// White space between the words of a traffic text or a CSV field: blanks and line ends.
inline bool isSpace(char c) { return ascii::isBlank(c) || c == '\r' || c == '\n'; }

inline std::string_view trim(std::string_view s) { return ascii::trim(s, isSpace); }

inline std::string quoted(std::string_view s) { return std::string("'").append(s).append("'"); }

/// A time unit: its length and how `Limit::parse` spells it (the unused spellings are empty).
struct TimeUnit {
    std::int64_t nanos = 0;
    std::array<std::string_view, 4> spellings;
};

inline constexpr std::int64_t kSecondNanos = 1'000'000'000;

/// Spelled as `Limit::parse` spells them, so a time reads the way a rule's period does.
inline constexpr std::array<TimeUnit, 7> kTimeUnits{{
    {1, {"ns", "nanosecond", "nanoseconds"}},
    {1'000, {"us", "microsecond", "microseconds"}},
    {1'000'000, {"ms", "millisecond", "milliseconds"}},
    {kSecondNanos, {"s", "sec", "second", "seconds"}},
    {60 * kSecondNanos, {"m", "min", "minute", "minutes"}},
    {3600 * kSecondNanos, {"h", "hr", "hour", "hours"}},
    {86400 * kSecondNanos, {"d", "day", "days"}},
}};

/// Nanoseconds per unit (in any case); 0 when unknown.
inline std::int64_t unitNanos(std::string_view unit) {
    if (unit.empty()) {
        return 0;  // not a unit, though the table's padding spellings are empty
    }
    std::string u;
    for (const char c : unit) {
        u.push_back(ascii::toLower(c));
    }
    for (const TimeUnit& known : kTimeUnits) {
        if (std::find(known.spellings.begin(), known.spellings.end(), u) != known.spellings.end()) {
            return known.nanos;
        }
    }
    return 0;
}

/// A whole number in 0 … kMaxCount, or -1 when `text` is not one.
inline std::int64_t wholeNumber(std::string_view text) {
    if (text.empty() || text.size() > 16) {
        return -1;
    }
    std::int64_t value = 0;
    for (const char c : text) {
        if (!ascii::isDigit(c)) {
            return -1;
        }
        value = value * 10 + (c - '0');
    }
    return value <= kMaxCount ? value : -1;
}

}  // namespace detail

namespace detail {

/// At most 18 decimals: one more and the scale overflows std::int64_t.
inline constexpr std::int64_t kMaxDecimalScale = 1'000'000'000'000'000;

/// The decimals of a number: `digits / scale` of a unit.
struct Decimals {
    std::int64_t digits = 0;
    std::int64_t scale = 1;
};

/// Reads the `<number><unit>` parts of a duration from left to right. Every message names the
/// place (`where`) and the whole text, so the user sees what was typed.
class DurationReader {
public:
    DurationReader(std::string_view text, std::string_view where)
        : text_(text), where_(where), shown_(quoted(text)) {}

    [[nodiscard]] bool atEnd() const { return pos_ >= text_.size(); }

    /// The next part in nanoseconds. Throws: `InputError`.
    std::int64_t part() {
        const std::int64_t whole = wholePart();
        const Decimals decimals = decimalPart();
        return nanos(whole, decimals, unit());
    }

    [[noreturn]] void tooLarge() const { reject("time " + shown_ + " is too large"); }

private:
    [[nodiscard]] bool atDigit() const { return !atEnd() && ascii::isDigit(text_[pos_]); }
    [[nodiscard]] std::int64_t digit() const { return text_[pos_] - '0'; }
    [[noreturn]] void reject(const std::string& what) const { fail(where_, what); }

    std::int64_t wholePart() {
        if (!atDigit()) {
            reject("expected a number at " + quoted(text_.substr(pos_)) + " in " + shown_);
        }
        std::int64_t whole = 0;
        for (; atDigit(); ++pos_) {
            if (__builtin_mul_overflow(whole, std::int64_t{10}, &whole) ||
                __builtin_add_overflow(whole, digit(), &whole)) {
                tooLarge();
            }
        }
        return whole;
    }

    Decimals decimalPart() {
        Decimals decimals;
        if (atEnd() || text_[pos_] != '.') {
            return decimals;
        }
        ++pos_;
        if (!atDigit()) {
            reject("expected digits after the decimal point in " + shown_);
        }
        for (; atDigit(); ++pos_) {
            if (decimals.scale >= kMaxDecimalScale) {
                reject("too many decimals in " + shown_);
            }
            decimals.digits = decimals.digits * 10 + digit();
            decimals.scale *= 10;
        }
        return decimals;
    }

    /// Nanoseconds per unit of the unit that follows the number.
    std::int64_t unit() {
        const std::size_t start = pos_;
        while (!atEnd() && ascii::isAlpha(text_[pos_])) {
            ++pos_;
        }
        const std::string_view name = text_.substr(start, pos_ - start);
        if (name.empty()) {
            reject("time " + shown_ +
                   " needs a unit (ns, us, ms, s, min, h, d), as in 30s or 1m10s");
        }
        const std::int64_t perUnit = unitNanos(name);
        if (perUnit == 0) {
            reject("unknown time unit " + quoted(name) + " in " + shown_ +
                   " (use ns, us, ms, s, min, h, d)");
        }
        return perUnit;
    }

    /// `whole.decimals` units in nanoseconds, which must come out whole.
    [[nodiscard]] std::int64_t nanos(std::int64_t whole, Decimals decimals,
                                     std::int64_t perUnit) const {
        __extension__ const __int128 decimalNanos =
            static_cast<__int128>(decimals.digits) * perUnit;
        if (decimalNanos % decimals.scale != 0) {
            reject("time " + shown_ + " is not a whole number of nanoseconds");
        }
        std::int64_t part = 0;
        if (__builtin_mul_overflow(whole, perUnit, &part) ||
            __builtin_add_overflow(part, static_cast<std::int64_t>(decimalNanos / decimals.scale),
                                   &part)) {
            tooLarge();
        }
        return part;
    }

    std::string_view text_;
    std::string_view where_;
    std::string shown_;
    std::size_t pos_ = 0;
};

}  // namespace detail

/// Parses a time or a duration: one or more `<number><unit>` parts, as in `59s`, `1m10s`,
/// `1.5s` or `250ms`, with the units of `Limit::parse` (ns, us, ms, s, m/min, h, d and their
/// long forms). The value must be a whole number of nanoseconds.
/// Throws: `InputError` starting with `where`.
inline Nanos parseDuration(std::string_view text, std::string_view where) {
    const std::string_view t = detail::trim(text);
    if (t.empty()) {
        fail(where, "expected a time such as 30s or 1m10s, found nothing");
    }
    if (t.front() == '-') {
        fail(where, "negative time " + detail::quoted(t) + " (times count from 0s)");
    }
    detail::DurationReader reader(t, where);
    std::int64_t total = 0;
    while (!reader.atEnd()) {
        if (__builtin_add_overflow(total, reader.part(), &total)) {
            reader.tooLarge();
        }
    }
    return Nanos{total};
}

/// `d` as `parseDuration` reads it back: `0s`, `1m10s`, `59s`, `1.5s`, `250ms`, `12.5us`.
inline std::string formatDuration(Nanos d) {
    constexpr std::int64_t kSecond = 1'000'000'000;
    std::int64_t ns = d.count();
    std::string out;
    if (ns < 0) {
        out = "-";
        ns = -ns;  // callers pass times from the replay, far from the minimum
    }
    const auto decimal = [](std::int64_t value, std::int64_t scale, std::string_view unit) {
        std::string text = std::to_string(value / scale);
        if (std::int64_t rest = value % scale; rest != 0) {
            std::string digits = std::to_string(rest);
            std::string padded(std::to_string(scale).size() - 1 - digits.size(), '0');
            padded += digits;
            while (!padded.empty() && padded.back() == '0') {
                padded.pop_back();
            }
            text.append(".").append(padded);
        }
        return text.append(unit);
    };
    if (ns == 0) {
        return "0s";
    }
    if (ns < kSecond) {
        if (ns >= 1'000'000) {
            return out + decimal(ns, 1'000'000, "ms");
        }
        if (ns >= 1'000) {
            return out + decimal(ns, 1'000, "us");
        }
        return out + std::to_string(ns) + "ns";
    }
    const std::int64_t days = ns / (86400 * kSecond);
    ns %= 86400 * kSecond;
    const std::int64_t hours = ns / (3600 * kSecond);
    ns %= 3600 * kSecond;
    const std::int64_t minutes = ns / (60 * kSecond);
    ns %= 60 * kSecond;
    if (days > 0) {
        out += std::to_string(days) + "d";
    }
    if (hours > 0) {
        out += std::to_string(hours) + "h";
    }
    if (minutes > 0) {
        out += std::to_string(minutes) + "m";
    }
    if (ns > 0) {
        out += decimal(ns, kSecond, "s");
    }
    return out;
}

/// Collects requests from several sources, then sorts them (stable: equal times keep the order
/// they were added in) and checks the total.
class TrafficBuilder {
public:
    void add(Nanos at, std::string_view key, std::int64_t cost, std::string_view where) {
        if (requests_.size() >= kMaxRequests) {
            fail(where, "more than " + std::to_string(kMaxRequests) + " requests in all");
        }
        auto [it, inserted] =
            keyIndex_.try_emplace(std::string(key), static_cast<std::uint32_t>(keys_.size()));
        if (inserted) {
            keys_.emplace_back(key);
        }
        requests_.push_back({at, it->second, cost});
    }

    /// `count` requests of cost 1 for the default key at `at`.
    void addMany(Nanos at, std::int64_t count, std::string_view where) {
        if (static_cast<std::size_t>(count) > kMaxRequests - requests_.size()) {
            fail(where, "more than " + std::to_string(kMaxRequests) + " requests in all");
        }
        for (std::int64_t i = 0; i < count; ++i) {
            add(at, kDefaultKey, 1, where);
        }
    }

    [[nodiscard]] bool empty() const { return requests_.empty(); }

    /// The traffic in time order. Throws: `InputError` when there is none.
    Traffic build() && {
        if (requests_.empty()) {
            throw InputError("the traffic is empty: give --traffic, --traffic-file or a generator");
        }
        std::stable_sort(requests_.begin(), requests_.end(),
                         [](const Request& a, const Request& b) { return a.at < b.at; });
        return Traffic{std::move(keys_), std::move(requests_)};
    }

private:
    std::vector<std::string> keys_;
    std::map<std::string, std::uint32_t, std::less<>> keyIndex_;
    std::vector<Request> requests_;
};

/// Inline traffic: `<time>:<count>` items separated by spaces or commas, as in
/// `0s:10 30s:5 70s:5` — `count` requests of cost 1 for the key "client" at each time.
/// Throws: `InputError` naming the item (counted from 1).
inline void parseInlineTraffic(std::string_view text, TrafficBuilder& out) {
    std::size_t pos = 0;
    int item = 0;
    while (true) {
        while (pos < text.size() && (detail::isSpace(text[pos]) || text[pos] == ',')) {
            ++pos;
        }
        if (pos >= text.size()) {
            break;
        }
        std::size_t end = pos;
        while (end < text.size() && !detail::isSpace(text[end]) && text[end] != ',') {
            ++end;
        }
        const std::string_view token = text.substr(pos, end - pos);
        pos = end;
        ++item;
        const std::string where =
            "--traffic item " + std::to_string(item) + " " + detail::quoted(token);
        const std::size_t colon = token.find(':');
        if (colon == std::string_view::npos) {
            fail(where, "expected <time>:<count>, as in 30s:5");
        }
        const Nanos at = parseDuration(token.substr(0, colon), where);
        const std::int64_t count = detail::wholeNumber(token.substr(colon + 1));
        if (count < 1) {
            fail(where, "the count after ':' must be a whole number from 1 to 2^48");
        }
        out.addMany(at, count, where);
    }
    if (item == 0) {
        throw InputError("--traffic: no items; expected <time>:<count> ..., as in '0s:10 30s:5'");
    }
}

namespace detail {

inline void skipBlanks(std::string_view line, std::size_t& pos) {
    while (pos < line.size() && ascii::isBlank(line[pos])) {
        ++pos;
    }
}

/// The quoted field whose opening quote is at `pos`, up to the comma after it (or the end).
/// False with `error` set when the quoting is broken.
inline bool readQuotedField(std::string_view line, std::size_t& pos, std::string& field,
                            std::string& error) {
    ++pos;  // the opening quote
    bool closed = false;
    while (pos < line.size() && !closed) {
        if (line[pos] != '"') {
            field.push_back(line[pos++]);
        } else if (pos + 1 < line.size() && line[pos + 1] == '"') {
            field.push_back('"');  // a doubled quote stands for one
            pos += 2;
        } else {
            closed = true;
            ++pos;
        }
    }
    if (!closed) {
        error = "a quoted field is not closed";
        return false;
    }
    skipBlanks(line, pos);
    if (pos < line.size() && line[pos] != ',') {
        error = "text after a closing quote";
        return false;
    }
    return true;
}

/// The unquoted field from `pos` up to the next comma (or the end), without the spaces around
/// it. False with `error` set when it holds a quote.
inline bool readPlainField(std::string_view line, std::size_t& pos, std::string& field,
                           std::string& error) {
    const std::size_t start = pos;
    while (pos < line.size() && line[pos] != ',') {
        if (line[pos] == '"') {
            error = "a quote inside an unquoted field";
            return false;
        }
        ++pos;
    }
    field = std::string(trim(line.substr(start, pos - start)));
    return true;
}

/// Splits one CSV line into fields: commas separate, double quotes may enclose a field (a
/// doubled quote inside is one quote), spaces around a field are dropped. False with `error`
/// set when the quoting is broken.
inline bool splitCsv(std::string_view line, std::vector<std::string>& fields, std::string& error) {
    fields.clear();
    std::size_t pos = 0;
    while (true) {
        skipBlanks(line, pos);
        std::string field;
        const bool isQuoted = pos < line.size() && line[pos] == '"';
        if (!(isQuoted ? readQuotedField(line, pos, field, error)
                       : readPlainField(line, pos, field, error))) {
            return false;
        }
        fields.push_back(std::move(field));
        if (pos >= line.size()) {
            return true;
        }
        ++pos;  // the comma
    }
}

}  // namespace detail

/// Reads `time,key,cost` lines (CSV): time as `parseDuration` reads it, any key (quote it if it
/// holds a comma or a quote), cost a whole number from 1 to 2^48. Blank lines and lines whose
/// first character is `#` are skipped, and so is a first line `time,key,cost`. Rows may come in
/// any order of time. `name` is how messages call the input (a file name).
/// Throws: `InputError` as `<name>:<line>: <what>` for the first malformed line.
inline void readCsv(std::istream& in, std::string_view name, TrafficBuilder& out) {
    std::string line;
    std::vector<std::string> fields;
    std::string error;
    std::size_t number = 0;
    bool first = true;
    while (std::getline(in, line)) {
        ++number;
        const std::string where = std::string(name) + ":" + std::to_string(number);
        std::string_view text = line;
        if (!text.empty() && text.back() == '\r') {
            text.remove_suffix(1);
        }
        if (detail::trim(text).empty() || detail::trim(text).front() == '#') {
            continue;
        }
        if (!detail::splitCsv(text, fields, error)) {
            fail(where, error);
        }
        const bool header = first && fields.size() == 3 && fields[0] == "time" &&
                            fields[1] == "key" && fields[2] == "cost";
        first = false;
        if (header) {
            continue;
        }
        if (fields.size() != 3) {
            fail(where, "expected 3 fields time,key,cost, found " + std::to_string(fields.size()));
        }
        const Nanos at = parseDuration(fields[0], where);
        const std::int64_t cost = detail::wholeNumber(fields[2]);
        if (cost < 1) {
            fail(where,
                 "cost " + detail::quoted(fields[2]) + " is not a whole number from 1 to 2^48");
        }
        out.add(at, fields[1], cost, where);
    }
    if (in.bad()) {
        throw InputError(std::string(name) + ": read error");
    }
}

/// A generated pattern: a steady rate over `duration`, bursts at given times and, on request,
/// the boundary burst of the rule (`count` just before the first window edge and `count` at
/// it).
struct Generator {
    /// `count` requests per `period`, evenly spaced from 0s; none when `steadyCount` is 0.
    std::int64_t steadyCount = 0;
    Nanos steadyPeriod{1};
    /// How long the steady stream runs: requests at times in [0, duration).
    Nanos duration{0};
    /// (count, time) pairs.
    std::vector<std::pair<std::int64_t, Nanos>> bursts;
    /// `rule.count` at `period − period/60` and `rule.count` at `period` (100 at 00:59 and 100
    /// at 01:00 for 100 per minute).
    bool boundaryBurst = false;
};

/// Parses `--burst N@T`. Throws: `InputError`.
inline std::pair<std::int64_t, Nanos> parseBurst(std::string_view text) {
    const std::string where = "--burst " + detail::quoted(text);
    const std::size_t at = text.find('@');
    if (at == std::string_view::npos) {
        fail(where, "expected <count>@<time>, as in 50@30s");
    }
    const std::int64_t count = detail::wholeNumber(detail::trim(text.substr(0, at)));
    if (count < 1) {
        fail(where, "the count before '@' must be a whole number from 1 to 2^48");
    }
    return {count, parseDuration(text.substr(at + 1), where)};
}

/// Adds the generator's requests (key "client", cost 1). Throws: `InputError`.
inline void generate(const Generator& g, const ratelimit::Limit& rule, TrafficBuilder& out) {
    if (g.steadyCount > 0) {
        // Request i at floor(i·period/count): exact, no accumulated rounding.
        __extension__ using Wide = __int128;
        for (std::int64_t i = 0;; ++i) {
            const Wide t = Wide{i} * g.steadyPeriod.count() / g.steadyCount;
            if (t >= g.duration.count()) {
                break;
            }
            out.add(Nanos{static_cast<std::int64_t>(t)}, kDefaultKey, 1, "--steady");
        }
    }
    for (const auto& [count, at] : g.bursts) {
        out.addMany(at, count, "--burst");
    }
    if (g.boundaryBurst) {
        const Nanos edge = rule.period;
        out.addMany(edge - rule.period / 60, rule.count, "--boundary-burst");
        out.addMany(edge, rule.count, "--boundary-burst");
    }
}

}  // namespace explore
