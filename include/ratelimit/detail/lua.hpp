#pragma once

// The pieces every Redis script shares: exact integer helpers for Lua's doubles and the main
// chunk that runs one model's step. Each model keeps its own Lua next to its C++ step
// (`Model::kLua`); `composeScript` joins them into the script a storage sends.

#include <cstddef>
#include <string>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/detail/throw.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Integer helpers every model's Lua relies on.
///
/// Lua 5.1 numbers are doubles, exact for integers below 2^53, but `math.floor(a / b)` rounds
/// the quotient first and can land on the wrong integer near 2^53. `math.fmod` is exact (C
/// `fmod`), `a - r` is then an exact multiple of `b` and dividing it is exact, so `idiv`,
/// `ceildiv` and `imod` are exact for |a|, |b| < 2^53, b ~= 0. `fmt` is the one way a number
/// becomes a string (`tostring` and `..` print 14 significant digits).
///
/// `keepFor` gives a written key `ceil(reset / 1 ms) + 1` ms. The extra millisecond is not
/// slack: Redis counts a relative PEXPIRE from its cached command time, a whole millisecond
/// that can already be in the past, and deletes a key at once when that base plus the TTL is
/// not after the live clock (redis-server 7.0.15: `PEXPIRE k 1` in a script that crosses a
/// millisecond boundary deletes `k` before the script's next command). With the extra
/// millisecond the key outlives `now + reset` for the script's own `now`.
inline constexpr std::string_view kLuaPrelude = R"lua(
local function idiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r ~= 0 and (r < 0) ~= (b < 0) then q = q - 1 end
  return q
end
local function ceildiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r ~= 0 and (r < 0) == (b < 0) then q = q + 1 end
  return q
end
local function imod(a, b)
  local r = math.fmod(a, b)
  if r ~= 0 and (r < 0) ~= (b < 0) then r = r + b end
  return r
end
local function fmt(x)
  return string.format('%d', x)
end
local function keepFor(key, reset)
  if reset > 0 then
    redis.call('PEXPIRE', key, fmt(ceildiv(reset, 1000) + 1))
  else
    redis.call('DEL', key)
  end
end
)lua";

/// The main chunk, after `local model = <kName>`: reads the arguments, runs the step and
/// stores the state only when the call consumes and the step changed it. A refusal's rebase
/// is stored with `pcall`, so that at `maxmemory` (where `HSET` is denied) refusals still
/// answer; an admission that cannot be stored fails the script instead of admitting for free.
///
/// KEYS[1] state key; ARGV[1] now in µs, or '' to read `TIME`; ARGV[2] cost; ARGV[3] consume
/// 1/0; ARGV[4] phase µs (subtracted from now); ARGV[5..11] count, burst, period,
/// unitsPerToken, unitsPerTick, capacity, maxRuns; ARGV[12] limit; ARGV[13] late-call
/// tolerance µs. Returns {allowed 1/0,
/// limit, remaining, retry µs (-1 = never), reset µs}.
inline constexpr std::string_view kLuaMain = R"lua(
local function argument(i, name)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= math.floor(v) or v >= 9007199254740992 or v <= -9007199254740992 then
    error('ratelimit: ARGV ' .. name .. ' is not an integer below 2^53')
  end
  return v
end
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = argument(1, 'now')
end
now = now - argument(4, 'phase')
-- Any cost above the limit is refused for ever whatever its value, so it needs no bound.
local cost = tonumber(ARGV[2])
if cost == nil or cost ~= math.floor(cost) or cost < 0 then
  error('ratelimit: ARGV cost is not a whole number >= 0')
end
local consume = ARGV[3] == '1'
local p = {
  count = argument(5, 'count'),
  burst = argument(6, 'burst'),
  period = argument(7, 'period'),
  unitsPerToken = argument(8, 'unitsPerToken'),
  unitsPerTick = argument(9, 'unitsPerTick'),
  capacity = argument(10, 'capacity'),
  maxRuns = argument(11, 'maxRuns'),
}
local limit = argument(12, 'limit')
local tolerance = argument(13, 'lateTolerance')
local s = model.load(KEYS[1])
-- The late-call rule (detail::applyStep): a call at most `tolerance` before the last write is
-- answered at the last write, without a rebase, and its waits count from its own time.
local late = 0
local last = model.lastWrite(s)
if last ~= nil and now < last and last - now <= tolerance then
  late = last - now
  now = last
end
local allowed, remaining, retry, reset, write = model.step(s, now, cost, p)
if remaining < 0 then remaining = 0 end
if consume and cost > 0 and write then
  if allowed then
    model.store(KEYS[1], s, reset, p)
  else
    pcall(model.store, KEYS[1], s, reset, p)
  end
end
if late > 0 then
  if retry > 0 then retry = retry + late end
  if reset > 0 then reset = reset + late end
end
return {allowed and 1 or 0, limit, remaining, retry, reset}
)lua";

/// The script that runs one model's step: prelude, the shared bucket step, the model's Lua
/// (`Model::kLua`, defining the table `modelName`) and the main chunk. No `#!lua` shebang.
/// Throws: `std::invalid_argument` when `modelName` is not a Lua identifier.
inline std::string composeScript(std::string_view modelLua, std::string_view modelName) {
    const auto identifierChar = [](char c, bool first) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
               (!first && c >= '0' && c <= '9');
    };
    bool valid = !modelName.empty();
    for (std::size_t i = 0; valid && i < modelName.size(); ++i) {
        valid = identifierChar(modelName[i], i == 0);
    }
    if (!valid) {
        throwInvalidArgument(std::string("composeScript: model name '")
                                 .append(modelName)
                                 .append("' is not a Lua identifier"));
    }
    std::string script;
    script.reserve(kLuaPrelude.size() + kBucketStepLua.size() + modelLua.size() + modelName.size() +
                   kLuaMain.size() + 16);
    script.append(kLuaPrelude)
        .append(kBucketStepLua)
        .append(modelLua)
        .append("\nlocal model = ")
        .append(modelName)
        .append("\n")
        .append(kLuaMain);
    return script;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
