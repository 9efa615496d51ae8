#pragma once

#include <array>
#include <string_view>

#include <ratelimit/algorithms/token_bucket.hpp>

namespace ratelimit {
inline namespace v1 {

/// Leaky bucket as a meter: GCRA, as nginx `limit_req` and redis-cell do it. Each admitted
/// cell pushes the theoretical arrival time (TAT) one emission interval `period/count` later;
/// a request passes while the TAT stays within `burst` intervals of now.
///
/// The GCRA is the token bucket read another way: the TAT is the instant the bucket is full
/// again, `last + deficit/c` ticks (c = count/g), an exact rational kept relative to the key's
/// last write, so the interval is never rounded and no absolute time is ever added to. So this
/// model *is* the token bucket's step and state (16 bytes) under its own name and keys: the
/// two make the same decisions, clock steps included, by construction.
struct LeakyBucketModel : TokenBucketModel {
    static constexpr std::string_view kName = "leaky_bucket";
    /// Another name a configuration may use for it.
    static constexpr std::string_view kAlias = "gcra";

    /// Its own type, so that a storage keeps its keys apart from the token bucket's.
    struct State : TokenBucketModel::State {};

    /// The token bucket's Lua, under this model's name.
    static constexpr std::string_view kLuaAlias = "\nlocal leaky_bucket = token_bucket\n";
    static constexpr std::array<std::string_view, 2> kLua{TokenBucketModel::kLua[0], kLuaAlias};
};

/// GCRA is the leaky bucket as a meter; both names refer to one model.
using GcraModel = LeakyBucketModel;

}  // namespace v1
}  // namespace ratelimit
