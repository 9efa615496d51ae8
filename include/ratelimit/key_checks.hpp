#pragma once

// Several keys checked for one request, all or nothing: a client's address and its verified
// user id, an IPv6 /56 and its /48 (docs/semantics.md, "Several keys").

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <ratelimit/decision.hpp>

namespace ratelimit {
inline namespace v1 {

/// One check of a request: a limiter (a `Limiter` or an `AnyLimiter`), the key it counts and
/// the cost.
template <class L>
struct KeyCheck {
    L& limiter;
    std::string_view key;
    std::int64_t cost = 1;
};

template <class L>
KeyCheck(L&, std::string_view, std::int64_t) -> KeyCheck<L>;
template <class L>
KeyCheck(L&, std::string_view) -> KeyCheck<L>;

/// Checks each key in order and takes the cost from every one or from none: at the first
/// refusal, the checks before it give back what they took (`refund`), and the checks after it
/// take nothing (their decisions are peeks, so every figure can still be reported). Returns
/// the decisions in the checks' order; the request may go on when all are allowed (a given-back
/// check reports its figures after the refund, allowed).
///
/// Not one atomic step: between a take and its refund (microseconds in memory, a round trip
/// with Redis) another request can find the given-back cost spent, and be refused by it. An
/// admission that took nothing known gives back nothing: a dry-run's admission of a refusal
/// (`wouldRefuse`), or a degraded one (the store failed).
/// Throws: what the limiters throw (`std::invalid_argument` for a negative cost).
template <class... L>
std::array<Decision, sizeof...(L)> tryAcquireAll(const KeyCheck<L>&... checks) {
    constexpr std::size_t kChecks = sizeof...(L);
    std::array<Decision, kChecks> out{};
    std::size_t refusal = kChecks;  // the first refused check, if any
    std::size_t i = 0;
    const auto take = [&](const auto& check) {
        out[i] = refusal == kChecks ? check.limiter.tryAcquire(check.key, check.cost)
                                    : check.limiter.peek(check.key, check.cost);
        if (!out[i].allowed && refusal == kChecks) {
            refusal = i;
        }
        ++i;
    };
    (take(checks), ...);
    if (refusal < kChecks) {
        i = 0;
        const auto giveBack = [&](const auto& check) {
            const Decision& taken = out[i];
            if (i < refusal && !taken.wouldRefuse && !taken.degraded) {
                out[i] = check.limiter.refund(check.key, check.cost);
            }
            ++i;
        };
        (giveBack(checks), ...);
    }
    return out;
}

/// `tryAcquireAll` for a number of checks known only at run time (a route's set of rules), all
/// of one limiter type (`AnyLimiter` mixes algorithms): the same order, refunds and peeks.
/// `out[i]` receives the decision of `checks[i]`; the request may go on when all are allowed.
/// Preconditions: `out.size() == checks.size()`.
/// Throws: what the limiters throw (`std::invalid_argument` for a negative cost).
template <class L>
void tryAcquireAll(std::span<const KeyCheck<L>> checks, std::span<Decision> out) {
    const std::size_t count = checks.size();
    std::size_t refusal = count;  // the first refused check, if any
    for (std::size_t i = 0; i < count; ++i) {
        const KeyCheck<L>& check = checks[i];
        out[i] = refusal == count ? check.limiter.tryAcquire(check.key, check.cost)
                                  : check.limiter.peek(check.key, check.cost);
        if (!out[i].allowed && refusal == count) {
            refusal = i;
        }
    }
    for (std::size_t i = 0; i < refusal && refusal < count; ++i) {
        const KeyCheck<L>& check = checks[i];
        if (!out[i].wouldRefuse && !out[i].degraded) {
            out[i] = check.limiter.refund(check.key, check.cost);
        }
    }
}

}  // namespace v1
}  // namespace ratelimit
