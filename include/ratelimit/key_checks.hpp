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

namespace detail {

/// The checks' one rule, for both forms of `tryAcquireAll`: a check takes its cost while no
/// check before it refused, and only peeks after (`refusal` is the first refused check's
/// index, `none` while there is none).
template <class L>
Decision takeInTurn(const KeyCheck<L>& check, std::size_t index, std::size_t& refusal,
                    std::size_t none) {
    Decision d = refusal == none ? check.limiter.tryAcquire(check.key, check.cost)
                                 : check.limiter.peek(check.key, check.cost);
    if (!d.allowed && refusal == none) {
        refusal = index;
    }
    return d;
}

/// A check before the first refusal gives back what it took; one that took nothing known (a
/// dry-run's admission of a refusal, a degraded decision) gives back nothing.
template <class L>
void giveBack(const KeyCheck<L>& check, Decision& taken) {
    if (!taken.wouldRefuse && !taken.degraded) {
        taken = check.limiter.refund(check.key, check.cost);
    }
}

}  // namespace detail

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
    std::size_t refusal = kChecks;
    std::size_t i = 0;
    ((out[i] = detail::takeInTurn(checks, i, refusal, kChecks), ++i), ...);
    if (refusal < kChecks) {
        i = 0;
        ((i < refusal ? detail::giveBack(checks, out[i]) : void(), ++i), ...);
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
    std::size_t refusal = count;
    for (std::size_t i = 0; i < count; ++i) {
        out[i] = detail::takeInTurn(checks[i], i, refusal, count);
    }
    for (std::size_t i = 0; i < refusal && refusal < count; ++i) {
        detail::giveBack(checks[i], out[i]);
    }
}

}  // namespace v1
}  // namespace ratelimit
