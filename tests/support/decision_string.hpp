#pragma once

// How tests print a ratelimit::Decision and a ratelimit::Limit: `describe(...)` for failure
// contexts built by hand, and the Catch2 StringMakers (v2 and v3) that make `CHECK(a == b)`
// print every field. Included by support/catch.hpp, so every test translation unit sees the
// same specializations.

#include <string>

#include <ratelimit/decision.hpp>
#include <ratelimit/limit.hpp>

#include "support/catch.hpp"

namespace ratelimit_test {

inline std::string describe(const ratelimit::Limit& l) {
    return "Limit{count=" + std::to_string(l.count) +
           ", period=" + std::to_string(l.period.count()) + "ns, burst=" + std::to_string(l.burst) +
           "}";
}

inline std::string describe(const ratelimit::Decision& d) {
    return std::string("Decision{allowed=") + (d.allowed ? "true" : "false") +
           ", limit=" + std::to_string(d.limit) + ", remaining=" + std::to_string(d.remaining) +
           ", retryAfter=" +
           (d.never() ? std::string("never") : std::to_string(d.retryAfter.count()) + "ns") +
           ", resetAfter=" + std::to_string(d.resetAfter.count()) + "ns" +
           (d.degraded ? ", degraded" : "") +
           (d.policy != 0 ? ", policy=" + std::to_string(d.policy) : std::string()) + "}";
}

}  // namespace ratelimit_test

namespace Catch {

template <>
struct StringMaker<ratelimit::Decision> {
    static std::string convert(const ratelimit::Decision& d) { return ratelimit_test::describe(d); }
};

template <>
struct StringMaker<ratelimit::Limit> {
    static std::string convert(const ratelimit::Limit& l) { return ratelimit_test::describe(l); }
};

}  // namespace Catch
