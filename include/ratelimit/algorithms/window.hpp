#pragma once

// What both window models (fixed window and sliding counter) measure, in C++ and as the Lua
// their scripts share: where `now` lies relative to a key's window and to the epoch-aligned one.

#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// How far `now` lies into the window of a key whose last write, at `last`, was `into` into
/// its window (saturated: clock values set by hand may sit anywhere in the int64 range).
constexpr Tick windowElapsed(Tick into, Tick last, Tick now) noexcept {
    return satAdd(into, satSub(now, last));
}

/// How far `now` lies into its epoch-aligned window, the period given as its divisor
/// (`Quota::perPeriod`): a multiply, not a divide, for the times from 0 on that clocks give.
RATELIMIT_INLINE constexpr Tick alignedInto(Tick now, const Divisor& period) noexcept {
    return now >= 0 ? now - period.floor(now) * period.divisor() : floorMod(now, period.divisor());
}

/// The same in Lua. Times are below 2^53 µs; a sum beyond that only meets comparisons and
/// `math.min` with values below the period, which rounding cannot reverse.
inline constexpr std::string_view kWindowLua = R"lua(
local function windowElapsed(into, last, now)
  return into + (now - last)
end
local function alignedInto(now, period)
  return imod(now, period)
end
)lua";

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
