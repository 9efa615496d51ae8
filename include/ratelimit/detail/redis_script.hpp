#pragma once

// A model's Redis script and the request that runs it. Each model keeps its Lua next to its
// C++ step (`Model::kLua`); `composeScript` joins it with the helpers every model uses and the
// main chunk that loads the key's state, applies the step and stores what it wrote.

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <ratelimit/detail/ascii.hpp>
#include <ratelimit/detail/redis_connection.hpp>
#include <ratelimit/detail/throw.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Helpers every model's Lua relies on.
///
/// Lua 5.1 numbers are doubles, exact for integers below 2^53, but `math.floor(a / b)` rounds
/// the quotient first and can land on the wrong integer near 2^53. `math.fmod` is exact (C
/// `fmod`), `a - r` is then an exact multiple of `b` and dividing it is exact, so `idiv`,
/// `ceildiv` and `imod` are exact for |a|, |b| < 2^53, b ~= 0. `fmt` is the one way a number
/// becomes a string (`tostring` and `..` print 14 significant digits). The decision builders
/// are the C++ ones (algorithms/model.hpp): a retry of -1 means never.
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
local function copyOf(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end
local function decision(q, allowed, remaining, retry, reset)
  if remaining < 0 then remaining = 0 end
  return {allowed = allowed, remaining = remaining, retry = retry, reset = reset}
end
local function admitted(q, remaining, reset)
  return decision(q, true, remaining, 0, reset)
end
local function refused(q, remaining, retry, reset)
  return decision(q, false, remaining, retry, reset)
end
local function refusedForever(q, remaining, reset)
  return decision(q, false, remaining, -1, reset)
end
)lua";

/// The arguments of one call, in ARGV order (the quota's follow): the time in µs, or empty to
/// read `TIME`; the cost; 1 to consume or 0 to peek; the key's window phase in µs.
inline constexpr std::array<std::string_view, 4> kCallArguments{"now", "cost", "consume", "phase"};

/// ARGV index (from 0) of the call argument `name`.
consteval std::size_t callArgument(std::string_view name) {
    const auto* const found = std::find(kCallArguments.begin(), kCallArguments.end(), name);
    if (found == kCallArguments.end()) {
        throwInvalidArgument("not a call argument");  // not constant: a compile error
    }
    return static_cast<std::size_t>(found - kCallArguments.begin());
}

/// The main chunk, after the model's Lua and the tables `model`, `STATE` (the state's hash
/// fields), `CALL` (call argument → ARGV index) and `QUOTA` (the quota's fields, in ARGV order
/// after the call's). It loads the key's state (a missing or unreadable one is fresh), applies
/// the step under the late-call rule of `detail::applyStep`, and stores the state the step
/// wrote, with a TTL that outlives it: `keep` ticks (the model's, or the decision's reset)
/// plus the late-call tolerance, rounded up to 1 ms, plus 1 ms. That millisecond is not slack:
/// Redis counts a relative PEXPIRE from its cached command time, a whole millisecond that can
/// already be in the past, and deletes a key at once when that base plus the TTL is not after the
/// live clock (redis-server 7.0.15). A refusal's rebase is stored with `pcall`, so that at
/// `maxmemory` (where `HSET` is denied) refusals still answer; an admission that cannot be stored
/// fails the script instead of admitting for free. Returns {allowed 1/0, limit, remaining, retry µs
/// (-1 = never), reset µs}.
inline constexpr std::string_view kLuaMain = R"lua(
local function argument(i, name)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= math.floor(v) or v >= 9007199254740992 or v <= -9007199254740992 then
    error('ratelimit: ARGV ' .. name .. ' is not an integer below 2^53')
  end
  return v
end
local function load(key)
  local values = redis.call('HMGET', key, unpack(STATE))
  local fields = {}
  for i, field in ipairs(STATE) do
    if not values[i] then
      return model.fresh()
    end
    fields[field] = values[i]
  end
  return model.decode(fields)
end
local function store(key, state, keep)
  if keep <= 0 then
    redis.call('DEL', key)
    return
  end
  local encoded = model.encode(state)
  local fieldsAndValues = {}
  for _, field in ipairs(STATE) do
    fieldsAndValues[#fieldsAndValues + 1] = field
    fieldsAndValues[#fieldsAndValues + 1] = encoded[field]
  end
  redis.call('HSET', key, unpack(fieldsAndValues))
  redis.call('PEXPIRE', key, fmt(ceildiv(keep, 1000) + 1))
end
-- Numeric states, unless the model encodes its own.
if not model.fresh then
  model.fresh = function()
    local state = {}
    for _, field in ipairs(STATE) do state[field] = 0 end
    return state
  end
  model.decode = function(fields)
    local state = {}
    for field, text in pairs(fields) do
      state[field] = tonumber(text)
      if state[field] == nil then return model.fresh() end
    end
    return state
  end
  model.encode = function(state)
    local fields = {}
    for _, field in ipairs(STATE) do fields[field] = fmt(state[field]) end
    return fields
  end
end
if not model.keep then
  model.keep = function(state, q, reset) return reset end
end

local now
if ARGV[CALL.now] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = argument(CALL.now, 'now')
end
now = now - argument(CALL.phase, 'phase')
-- Any cost above the limit is refused for ever whatever its value, so it needs no bound.
local cost = tonumber(ARGV[CALL.cost])
if cost == nil or cost ~= math.floor(cost) or cost < 0 then
  error('ratelimit: ARGV cost is not a whole number >= 0')
end
local consume = ARGV[CALL.consume] == '1'
local q = {}
for i, name in ipairs(QUOTA) do
  q[name] = argument(#CALL_NAMES + i, name)
end

local state = load(KEYS[1])
-- detail::applyStep: a call at most lateTolerance before the last write is answered at the
-- last write, without a rebase, and its waits count from its own time.
local late = 0
local last = model.lastWrite(state)
if last ~= nil and now < last and last - now <= q.lateTolerance then
  late = last - now
  now = last
end
local d, written = model.step(state, q, now, cost)
if consume and cost > 0 and written then
  -- Kept for the late-call tolerance longer: a call that late must find the state, not a
  -- fresh key.
  local keep = model.keep(written, q, d.reset) + q.lateTolerance
  if d.allowed then
    store(KEYS[1], written, keep)
  else
    pcall(store, KEYS[1], written, keep)
  end
end
if late > 0 then
  if d.retry > 0 then d.retry = d.retry + late end
  if d.reset > 0 then d.reset = d.reset + late end
end
return {d.allowed and 1 or 0, q.capacity, d.remaining, d.retry, d.reset}
)lua";

/// What one model's script is made of.
struct ScriptModel {
    std::string_view name;                          ///< the model's Lua table (`kName`)
    std::span<const std::string_view> lua;          ///< `kLua`: pieces, joined in order
    std::span<const std::string_view> stateFields;  ///< `kStateFields`
};

/// `{'a', 'b'}`: names as a Lua array of strings.
inline void appendLuaNames(std::string& out, std::span<const std::string_view> names) {
    out.push_back('{');
    for (std::size_t i = 0; i < names.size(); ++i) {
        out.append(i == 0 ? "'" : ", '").append(names[i]).push_back('\'');
    }
    out.push_back('}');
}

/// True for a Lua identifier: a letter or `_`, then letters, digits and `_`.
constexpr bool isLuaIdentifier(std::string_view s) noexcept {
    const auto word = [](char c) { return ascii::isAlnum(c) || c == '_'; };
    return !s.empty() && !ascii::isDigit(s.front()) && std::all_of(s.begin(), s.end(), word);
}

/// The script that runs one model's step: the prelude, the model's Lua (defining the table
/// `model.name`), the tables the main chunk reads, and the main chunk. No `#!lua` shebang.
/// Throws: `std::invalid_argument` when a name is not a Lua identifier.
inline std::string composeScript(const ScriptModel& model,
                                 std::span<const std::string_view> quotaFields) {
    const auto checkName = [](std::string_view name) {
        if (!isLuaIdentifier(name)) {
            throwInvalidArgument(
                std::string("composeScript: '").append(name).append("' is not a Lua identifier"));
        }
    };
    checkName(model.name);
    std::for_each(model.stateFields.begin(), model.stateFields.end(), checkName);
    std::for_each(quotaFields.begin(), quotaFields.end(), checkName);
    std::string script;
    constexpr std::size_t kTables = 512;  // the four tables' text
    std::size_t luaSize = 0;
    for (const std::string_view piece : model.lua) {
        luaSize += piece.size();
    }
    script.reserve(kLuaPrelude.size() + luaSize + kLuaMain.size() + kTables);
    script.append(kLuaPrelude);
    for (const std::string_view piece : model.lua) {
        script.append(piece);
    }
    script.append("\nlocal model = ").append(model.name).append("\nlocal STATE = ");
    appendLuaNames(script, model.stateFields);
    script.append("\nlocal CALL_NAMES = ");
    appendLuaNames(script, kCallArguments);
    script.append("\nlocal CALL = {}\nfor i, name in ipairs(CALL_NAMES) do CALL[name] = i end");
    script.append("\nlocal QUOTA = ");
    appendLuaNames(script, quotaFields);
    script.append("\n").append(kLuaMain);
    return script;
}

/// `v` in decimal.
inline std::string decimal(std::int64_t v) {
    constexpr std::size_t kDigits = 24;  // a sign and 19 digits fit
    std::array<char, kDigits> buffer{};
    const char* const end = std::to_chars(buffer.data(), buffer.data() + buffer.size(), v).ptr;
    return {buffer.data(), static_cast<std::size_t>(end - buffer.data())};
}

/// One call of a model's script.
struct ScriptCall {
    std::string_view now;  ///< µs in decimal, or empty: the script reads `TIME`
    std::int64_t cost = 0;
    bool consume = false;  ///< false: a peek
    std::int64_t phase = 0;
};

/// Appends `verb` (`EVALSHA` or `EVAL`) of `scriptOrSha` on `key` with the call's arguments in
/// `kCallArguments` order, then the quota's.
inline void appendScriptRequest(std::string& out, std::string_view verb,
                                std::string_view scriptOrSha, std::string_view key,
                                const ScriptCall& call, std::span<const std::string> quota) {
    std::array<std::string, kCallArguments.size()> arguments;
    arguments[callArgument("now")] = call.now;
    arguments[callArgument("cost")] = decimal(call.cost);
    arguments[callArgument("consume")] = call.consume ? "1" : "0";
    arguments[callArgument("phase")] = decimal(call.phase);
    constexpr std::size_t kHead = 4;  // verb, script, the number of keys, the key
    appendCommandHeader(out, kHead + arguments.size() + quota.size());
    appendArgument(out, verb);
    appendArgument(out, scriptOrSha);
    appendArgument(out, "1");
    appendArgument(out, key);
    for (const std::string& a : arguments) {
        appendArgument(out, a);
    }
    for (const std::string& a : quota) {
        appendArgument(out, a);
    }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
