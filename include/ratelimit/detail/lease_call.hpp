#pragma once

// What a `LeasedLimiter` asks of a store that keeps a lease ledger (docs/semantics.md, "Token
// leases").

#include <cstdint>
#include <string_view>

#include <ratelimit/detail/chrono.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// One store call of a leasing host on a key: the step of `cost`, and the host's entry in the
/// key's ledger, which records the tokens the host may hold unspent so that the store takes
/// them back when the host stops calling (`kLuaLeaseMain` has the rule).
struct LeaseCall {
    std::string_view host;      ///< the host's name in the ledger, unique per host
    std::int64_t cost = 0;      ///< the step's cost; 0 returns tokens alone
    std::int64_t recorded = 0;  ///< what the host's entry held after its last call
    std::int64_t returned = 0;  ///< unspent tokens given back
    std::int64_t held = 0;      ///< unspent tokens the host goes on spending
    std::int64_t leased = 0;    ///< of `cost`, what the host holds unspent when the step admits
    std::chrono::nanoseconds life{};  ///< how long the store keeps the entry
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
