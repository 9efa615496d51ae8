#pragma once

// A model's Redis script and the request that runs it. Each model keeps its Lua next to its
// C++ step (`Model::kLua`); `composeScript` joins it with the helpers it uses, the
// reading of the call's arguments, the loading and storing of the model's state (written out
// for its fields), and the main chunk that applies the step and stores what it wrote.
//
// The script runs on every check, on the server's one core, so its cost is the server's
// throughput: it is written for the Lua interpreter's costs, measured in bench/README.md
// ("Redis, server CPU per check"). A `local function` is a closure made anew on each call and
// a table is an allocation, so there are few of either, and a step returns its decision as
// values, not as a table.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/detail/ascii.hpp>
#include <ratelimit/detail/redis_connection.hpp>
#include <ratelimit/detail/sha1.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/options.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The helpers a model's Lua may use, each one included in a script only when the script
/// uses it (`appendLuaHelpers`): in a script sent whole (`ScriptForm::kEval`) a `local
/// function` is a closure made on every call.
///
/// Lua 5.1 numbers are doubles, exact for integers below 2^53. `idiv` and `ceildiv` round the
/// quotient and then take its floor or ceiling, which is exact for |a| < 2^53, b ~= 0: the
/// division is correctly rounded (IEEE 754), so the rounded a / b is off the true one by at
/// most half an ulp, at most |a / b|·2^-53 < 1/|b|, while a true quotient that is not whole
/// lies at least 1/|b| from every integer; so rounding never carries it onto one (the Lua test
/// divides q·b − 1, q·b and q·b + 1 for the largest q below 2^53). `imod` keeps `math.fmod` (C
/// `fmod`, exact), since q·b may pass 2^53. They name `math` where they call it: a function
/// library's top level runs without the `math` table. `fmt` is the one way a number becomes a
/// string (`tostring` and `..` print 14 significant digits). The decision builders are the C++
/// ones (algorithms/model.hpp), returning a decision as four values: allowed, remaining, retry
/// (-1 means never) and reset. A helper uses only the ones before it.
struct LuaHelper {
    std::string_view name;
    std::string_view lua;
};
inline constexpr std::array<LuaHelper, 7> kLuaHelpers{{
    {"idiv", R"lua(local function idiv(a, b)
  return math.floor(a / b)
end
)lua"},
    {"ceildiv", R"lua(local function ceildiv(a, b)
  return math.ceil(a / b)
end
)lua"},
    {"imod", R"lua(local function imod(a, b)
  local r = math.fmod(a, b)
  if r ~= 0 and (r < 0) ~= (b < 0) then r = r + b end
  return r
end
)lua"},
    {"fmt", R"lua(local function fmt(x)
  return string.format('%d', x)
end
)lua"},
    {"admitted", R"lua(local function admitted(remaining, reset)
  return true, remaining, 0, reset
end
)lua"},
    {"refused", R"lua(local function refused(remaining, retry, reset)
  return false, remaining, retry, reset
end
)lua"},
    {"refusedForever", R"lua(local function refusedForever(remaining, reset)
  return false, remaining, -1, reset
end
)lua"},
}};

/// Whether Lua `code` names `name` (after `prefix`, such as "q."): an occurrence with no
/// identifier character on either side, nor a `.` before (`math.fmod` is not `fmod`).
constexpr bool namesInLua(std::string_view code, std::string_view name,
                          std::string_view prefix = {}) noexcept {
    const auto word = [](char c) { return ascii::isAlnum(c) || c == '_'; };
    const std::size_t size = prefix.size() + name.size();
    for (std::size_t at = code.find(name); at != std::string_view::npos;
         at = code.find(name, at + 1)) {
        if (at < prefix.size() || code.substr(at - prefix.size(), prefix.size()) != prefix) {
            continue;
        }
        const std::size_t begin = at - prefix.size();
        const bool clearBefore = begin == 0 || (!word(code[begin - 1]) && code[begin - 1] != '.');
        const bool clearAfter = begin + size == code.size() || !word(code[begin + size]);
        if (clearBefore && clearAfter) {
            return true;
        }
    }
    return false;
}

/// Appends the helpers that `code` uses, directly or through another helper, in their order.
inline void appendLuaHelpers(std::string& out, std::string_view code) {
    std::array<bool, kLuaHelpers.size()> used{};
    for (std::size_t i = kLuaHelpers.size(); i-- > 0;) {
        used[i] = namesInLua(code, kLuaHelpers[i].name);
        for (std::size_t j = i + 1; j < kLuaHelpers.size() && !used[i]; ++j) {
            used[i] = used[j] && namesInLua(kLuaHelpers[j].lua, kLuaHelpers[i].name);
        }
    }
    for (std::size_t i = 0; i < kLuaHelpers.size(); ++i) {
        if (used[i]) {
            out.append(kLuaHelpers[i].lua);
        }
    }
}

/// The arguments of one call, in ARGV order (the quota's follow): the time in µs, or empty to
/// read `TIME`; the cost; the `StepMode` (0 to peek, 1 to consume, 2 to refund, 3 to give
/// strikes); the key's window phase in µs.
inline constexpr std::array<std::string_view, 4> kCallArguments{"now", "cost", "consume", "phase"};

/// ARGV index (from 0) of the call argument `name`.
consteval std::size_t callArgument(std::string_view name) {
    const auto* const found = std::find(kCallArguments.begin(), kCallArguments.end(), name);
    if (found == kCallArguments.end()) {
        throwInvalidArgument("not a call argument");  // not constant: a compile error
    }
    return static_cast<std::size_t>(found - kCallArguments.begin());
}
static_assert(callArgument("now") == 0 && callArgument("cost") == 1 &&
                  callArgument("consume") == 2 && callArgument("phase") == 3,
              "kLuaCall reads ARGV[1] … ARGV[4] in this order");

/// ARGV index (from 1) of the quota's identity, after the call's arguments: the quota's
/// arguments that follow it, joined (`quotaIdentity`). A function library keeps the tables it
/// read a quota into under it, so a call of a quota it has seen reads none of its numbers.
inline constexpr std::size_t kQuotaIdentityArgument = kCallArguments.size() + 1;
/// ARGV index (from 1) of the quota's first argument.
inline constexpr std::size_t kQuotaArgumentsStart = kQuotaIdentityArgument + 1;

/// How a script reaches the server. `kEval`: a chunk sent by `EVALSHA` (and `EVAL` when the
/// server lacks it), run whole on every call, so its helpers and models are closures made
/// anew each time and its quota is read from the arguments each time. `kLibrary`: a Redis
/// function library (Redis 7+; `FUNCTION LOAD` once per server, then `FCALL`), whose top
/// level defines the helpers and models once, and whose one function runs the call; it keeps
/// up to `kQuotasKept` quotas it has read, by identity.
enum class ScriptForm { kEval, kLibrary };

/// The quotas a library keeps read; past that it starts again (a table enforces one quota at a
/// time, and a change of limit or a tier is a few more).
inline constexpr int kQuotasKept = 64;

/// The call's own arguments: the time (a missing one reads `TIME`) less the key's phase, and
/// the cost. `now` and `cost` are checked, since a script error is the only safe answer to a
/// malformed one; the phase and the quota come from the storage, which checked the quota when
/// it was made, and are read as they are.
inline constexpr std::string_view kLuaCall = R"lua(
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
  if now == nil or now % 1 ~= 0 or now >= 9007199254740992 or now <= -9007199254740992 then
    error('ratelimit: ARGV now is not an integer below 2^53')
  end
end
now = now - tonumber(ARGV[4])
-- A cost above the limit is turned away whatever its value, so it needs no bound.
local cost = tonumber(ARGV[2])
if cost == nil or cost < 0 or cost % 1 ~= 0 then
  error('ratelimit: ARGV cost is not a whole number >= 0')
end
)lua";

/// A library's call, after `kLuaCall`: `quota`, the tables of this call's quota identity,
/// one per model (`q` is `quota[1]`, a set's member `i` `quota[i]`), filled by the glue the
/// first time the identity comes, from `quota.args`: the identity's parts, at the ARGV indices
/// where an `EVAL` call sends them (a library's call sends the identity alone: each argument
/// more costs the server an object and a Lua string on every call). `quotas` and `quotaCount`
/// are the library's own (`kLuaLibraryTop`).
inline constexpr std::string_view kLuaQuotaOfCall = R"lua(
local quota = quotas[ARGV[QUOTA_IDENTITY]]
if not quota then
  if quotaCount >= QUOTAS_KEPT then
    quotas, quotaCount = {}, 0
  end
  local args, at = {}, QUOTA_IDENTITY
  for part in string.gmatch(ARGV[QUOTA_IDENTITY], '[^:]+') do
    at = at + 1
    args[at] = part
  end
  quota, quotaCount = {args = args}, quotaCount + 1
  quotas[ARGV[QUOTA_IDENTITY]] = quota
end
)lua";

/// Where a script in `form` reads the quota's arguments: `ARGV`, or a library's `quota.args`
/// (`kLuaQuotaOfCall`), by the same indices.
constexpr std::string_view quotaArgumentsIn(ScriptForm form) noexcept {
    return form == ScriptForm::kEval ? "ARGV" : "quota.args";
}

/// A library's top level after its helpers and models: the quotas it has read, by identity.
inline constexpr std::string_view kLuaLibraryTop = "\nlocal quotas, quotaCount = {}, 0\n";

/// The first field of a single model's reply: refused, admitted, or refused where the refusal
/// began a penalty's block. `kLuaReply` names them `REPLY_*`, and `composeScript` writes these
/// numbers in their place (`withReplyOutcomes`).
inline constexpr std::int64_t kReplyRefused = 0;
inline constexpr std::int64_t kReplyAdmitted = 1;
inline constexpr std::int64_t kReplyPenaltyStarted = 2;

/// The main chunk, after the model's Lua, the call's arguments, and what `composeScript`
/// writes for the model: `model`, the quota `q`, the key's `state` (a missing or unreadable one
/// is fresh) and `store(key, q, state, keep)`. It applies the step under the late-call rule of
/// `detail::applyStep` and stores the state the step wrote, with a TTL that outlives it:
/// `keep` ticks (the model's, or the decision's reset) plus the late-call tolerance, rounded
/// up to 1 ms, plus 1 ms. That millisecond is not slack: Redis counts a relative expiry from
/// its cached command time, a whole millisecond that can already be in the past, and deletes
/// a key at once when that base plus the TTL is not after the live clock (redis-server
/// 7.0.15). A refusal's rebase is stored with `pcall`, so that at `maxmemory` (where `SET` is
/// denied) refusals still answer; an admission that cannot be stored fails the script instead
/// of admitting for free. A refund (`ARGV[3] == '2'`, `detail::applyRefund`) or strikes
/// (`'3'`, `detail::applyAction`) store what the model changed and answer the key's figures as
/// they stand. Returns {outcome, remaining, retry µs (-1 = never), reset µs}: the outcome is
/// `kReplyAdmitted`, `kReplyRefused`, or `kReplyPenaltyStarted` (a penalized model's refusal
/// that began a block). The client knows the limit: each field more costs the server a reply
/// element on every call. In three pieces: the late-call rule and the reply are the lease
/// script's too.
inline constexpr std::string_view kLuaLateRule = R"lua(
-- detail::applyStep: a call at most lateTolerance before the last write is answered at the
-- last write, without a rebase, and its waits count from its own time.
local late = 0
local last = model.lastWrite(state)
if last ~= nil and now < last and last - now <= q.lateTolerance then
  late = last - now
  now = last
end
)lua";
inline constexpr std::string_view kLuaStepAndStore = R"lua(
-- started: a penalized model's refusal began a block (`Decision::penaltyStarted`).
local written, allowed, remaining, retry, reset, started
if ARGV[3] == '2' or ARGV[3] == '3' then
  -- detail::applyAction: the model gives back up to cost (a refund) or takes cost strikes
  -- toward its penalty, then the key's figures as they stand.
  local changed
  if ARGV[3] == '2' then
    changed = model.refund(state, q, now, cost)
  else
    changed = model.penalize(state, q, now, cost)
  end
  written, allowed, remaining, retry, reset = model.step(state, q, now, 0)
  if not changed and cost > 0 then changed = carried end
  if changed then
    store(KEYS[1], q, changed, (model.keep and model.keep(changed, q, reset, now) or reset) + q.lateTolerance)
  end
else
  written, allowed, remaining, retry, reset, started = model.step(state, q, now, cost)
  -- A state carried over from another limit is stored by a consuming call, as in memory.
  local kept = written or carried
  if kept and cost > 0 and ARGV[3] == '1' then
    -- Kept for the late-call tolerance longer: a call that late must find the state, not a
    -- fresh key.
    local keep = (model.keep and model.keep(kept, q, reset, now) or reset) + q.lateTolerance
    if allowed then
      store(KEYS[1], q, kept, keep)
    else
      pcall(store, KEYS[1], q, kept, keep)
    end
  end
end
)lua";
/// The reply, the waits counted from the call's own time.
inline constexpr std::string_view kLuaReply = R"lua(
if late > 0 then
  if retry > 0 then retry = retry + late end
  if reset > 0 then reset = reset + late end
end
if remaining < 0 then remaining = 0 end
return {allowed and REPLY_ADMITTED or (started and REPLY_PENALTY_STARTED or REPLY_REFUSED), remaining, retry, reset}
)lua";
inline constexpr std::array<std::string_view, 3> kLuaMain{kLuaLateRule, kLuaStepAndStore,
                                                          kLuaReply};

/// The arguments of a lease's call (`LeaseCall`), after the quota's, in ARGV order.
inline constexpr std::array<std::string_view, 6> kLeaseArguments{"host", "recorded", "returned",
                                                                 "held", "leased",   "life"};

/// The main chunk of a bucket's lease script (`LeasedLimiter` over Redis; `kLuaMain`'s place,
/// with the same glue): the step of `cost`, and this host's entry in the key's lease ledger,
/// `KEYS[2]`, a hash of host to {tokens it may hold unspent, when the store takes them back}.
/// Atomically, before the step: every other host's expired entry comes back to the bucket (a
/// host that died leaks nothing past its entry's life); then, when this host's entry is there,
/// `returned` comes back; when it is not (taken back while the host still counted it: its
/// calls or its clock were late), the store takes again what the host spent and holds of it,
/// `recorded − returned`, as far as the bucket has it. After the step, the entry holds `held`,
/// plus `leased` when the step admitted, until `now + life`. The ledger lives until every
/// entry has expired and the bucket has refilled, after which it changes nothing. Replies as
/// `kLuaMain`.
inline constexpr std::string_view kLuaLedgerAndStep = R"lua(
local at = #ARGV - 6
local host = ARGV[at + 1]
local recorded, returned = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
local held, leased, life = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
local ledger = KEYS[2]
local back, mine = 0, false
local entries = redis.call('HGETALL', ledger)
for i = 1, #entries, 2 do
  if entries[i] == host then
    mine = true
  else
    local tokens, expires = struct.unpack('<dd', entries[i + 1])
    if expires <= now then
      back = back + tokens
      redis.call('HDEL', ledger, entries[i])
    end
  end
end
if mine then back = back + returned end
local changed
if back > 0 then changed = model.refund(state, q, now, back) end
if not mine and recorded > returned then
  local _, _, left = model.step(state, q, now, 0)
  local owed = math.min(recorded - returned, left)
  if owed > 0 then changed = model.step(state, q, now, owed) or changed end
end
local written, allowed, remaining, retry, reset, started = model.step(state, q, now, cost)
changed = written or changed or carried
local keep = held
if allowed and cost > 0 then keep = keep + leased end
if keep > 0 then
  redis.call('HSET', ledger, host, struct.pack('<dd', keep, now + life))
  local span = life + ceildiv(q.capacityUnits, q.unitsPerTick) + q.lateTolerance
  redis.call('PEXPIRE', ledger, fmt(ceildiv(span, 1000) + 1))
elseif mine then
  redis.call('HDEL', ledger, host)
end
if changed then
  local kept = (model.keep and model.keep(changed, q, reset, now) or reset) + q.lateTolerance
  if allowed then
    store(KEYS[1], q, changed, kept)
  else
    pcall(store, KEYS[1], q, changed, kept)
  end
end
)lua";
inline constexpr std::array<std::string_view, 3> kLuaLeaseMain{kLuaLateRule, kLuaLedgerAndStep,
                                                               kLuaReply};

/// What one model's script is made of.
struct ScriptModel {
    std::string_view name;                          ///< the model's Lua table (`kName`)
    std::span<const std::string_view> lua;          ///< `kLua`: pieces, joined in order
    std::span<const std::string_view> stateFields;  ///< `kStateFields`
    /// True when the model's Lua encodes its state itself (`fresh`, `decode` returning nil for
    /// a value it cannot read, and `encode`); otherwise the key's value is its fields, in
    /// order, as little-endian IEEE doubles.
    bool encodesState = false;
    /// True for a bucket, whose capacity is its burst (a window's is its count).
    bool bucket = false;
};

/// True for a Lua identifier: a letter or `_`, then letters, digits and `_`.
constexpr bool isLuaIdentifier(std::string_view s) noexcept {
    const auto word = [](char c) { return ascii::isAlnum(c) || c == '_'; };
    return !s.empty() && !ascii::isDigit(s.front()) && std::all_of(s.begin(), s.end(), word);
}

/// `<prefix>a, <prefix>b`: the names, each after `prefix`, separated by commas.
inline void appendLuaList(std::string& out, std::span<const std::string_view> names,
                          std::string_view prefix) {
    for (std::size_t i = 0; i < names.size(); ++i) {
        out.append(i == 0 ? "" : ", ").append(prefix).append(names[i]);
    }
}

/// Where one model's glue reads and writes: its names carry `suffix` (`model`, `q`, `state`,
/// `store`, and `load` where the state is `reloadable`), its key is `KEYS[key]`, its quota
/// starts at `ARGV[argument]` (and a library keeps it read in `quota[key]`).
struct GlueSite {
    std::string suffix;
    std::size_t key = 1;
    std::size_t argument = kQuotaArgumentsStart;
    bool reloadable = false;  ///< a `load` function reads the stored state again
    ScriptForm form = ScriptForm::kEval;
};

/// The Lua that carries a key's `state`, read with the quota `from` it was written under, over
/// to the quota `q` at `now` (`detail::convertedState`, the same rule): measured by a zero
/// cost's step under `from`, spent from a fresh state under `q` (a penalized model's inner
/// model does both, and its strikes stay: `PenalizedModel::convert`). `from` holds the stored
/// count, burst and period; the rest is completed from `q` (the bucket's units from their
/// gcd, where the model is a bucket). `carried` keeps a copy, which a consuming call stores even
/// when its step writes nothing, as memory does. Suffixed names end in `#`; `FRESH`, `COPY`,
/// `CAPACITY` and `UNITS` are filled in by `appendModelGlue`. Runs only after a limit changed, so
/// it makes no closure.
inline constexpr std::string_view kLuaCarryOver = R"lua(
if from then
  for k, v in pairs(q#) do
    if from[k] == nil then from[k] = v end
  end
  from.capacity = from.CAPACITY
UNITS  local measure = model#.inner or model#
  local _, _, left = measure.step(state, from, now, 0)
  if left < 0 then left = 0 end
  local consumed = from.capacity - left
  local target = 0
  if consumed > 0 then
    target = math.min(q#.capacity, consumed + math.max(0, q#.capacity - from.capacity))
  end
  local before = state
  state = FRESH
  if target > 0 then measure.step(state, q#, now, target) end
  if model#.carryPenalty then model#.carryPenalty(before, state) end
  carried = COPY
end
)lua";

/// A bucket's units under the stored limit `from` (`Quota::make`), for `kLuaCarryOver`.
inline constexpr std::string_view kLuaBucketUnits = R"lua(
  local a, b = from.count, from.period
  while b ~= 0 do a, b = b, math.fmod(a, b) end
  from.unitsPerToken = from.period / a
  from.unitsPerTick = from.count / a
  from.capacityUnits = from.burst * from.unitsPerToken
)lua";

/// The limit a key's value records after the model's encoding, so that a host with another
/// limit carries the state over (`Limiter::setLimit`): count, burst and period, as three
/// little-endian doubles.
inline constexpr std::size_t kStoredLimitBytes = 24;

/// Replaces every `from` in `text` by `to`.
inline std::string replaceAll(std::string text, std::string_view from, std::string_view to) {
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
        text.replace(at, from.size(), to);
        at += to.size();
    }
    return text;
}

/// `main` with the reply's outcomes (`kLuaReply`'s `REPLY_*`) written as the numbers the client
/// reads them by.
inline std::string withReplyOutcomes(std::string main) {
    main = replaceAll(std::move(main), "REPLY_ADMITTED", std::to_string(kReplyAdmitted));
    main =
        replaceAll(std::move(main), "REPLY_PENALTY_STARTED", std::to_string(kReplyPenaltyStarted));
    return replaceAll(std::move(main), "REPLY_REFUSED", std::to_string(kReplyRefused));
}

/// The Lua lines, each after `indent`, that start a call's plain `state` (its fields `names`,
/// fresh as `fresh`): a fresh table, or in a library (`site.form`) the table it keeps,
/// `scratch`, defined once in `definitions` and zeroed on every call (the previous call's step
/// left its values there).
inline std::string freshPlainState(std::string& definitions, const std::string& fresh,
                                   const std::string& names, const GlueSite& site,
                                   const std::string& indent) {
    if (site.form == ScriptForm::kEval) {
        return indent + "state = " + fresh + "\n";
    }
    const std::string scratch = "scratch" + site.suffix;
    definitions.append("local ").append(scratch).append(" = ").append(fresh).append("\n");
    std::string zeros = "0";
    for (std::size_t at = names.find(','); at != std::string::npos; at = names.find(',', at + 1)) {
        zeros.append(", 0");
    }
    return indent + "state = " + scratch + "\n" + indent + names + " = " + zeros + "\n";
}

/// The model's quota `q` (the fields `code` reads, and those the carry-over reads), its key's
/// `state` and `carried` (a state carried over from another limit, or nil), appended to `out`
/// (run on each call), and `store(key, q, state, keep)`, appended to `definitions` (a
/// library's top level: made once, not a closure per call), written out field by field for the
/// model, so the script builds no list of names and runs no loop over one on each call. The
/// key's value is a string (one `GET`, one `SET … PX`: a hash would cost a `PEXPIRE` more),
/// packed and unpacked by Redis's bundled `struct` library in one call each way: the model's
/// encoding, then the limit it was written under (`kStoredLimitBytes`). A value without the
/// limit (written before limits were recorded) is read as written under the current one. A
/// library reads a state of plain fields into one table it keeps (`scratch`), where a script
/// sent whole makes one per call anyway.
inline void appendModelGlue(std::string& out, std::string& definitions, const ScriptModel& model,
                            std::span<const std::string_view> quotaFields, std::string_view code,
                            const GlueSite& site = {}) {
    const std::span<const std::string_view> fields = model.stateFields;
    const std::string& n = site.suffix;
    const std::string key = "KEYS[" + std::to_string(site.key) + "]";
    const std::string qn = "q" + n;
    // The carry-over, for this model and site.
    std::string fresh;
    std::string copy;
    if (model.encodesState) {
        fresh = "model" + n + ".fresh()";
        // A deep copy: a step may change the entries a shallow one would share.
        copy = "model" + n + ".decode(model" + n + ".encode(state)) or model" + n + ".fresh()";
    } else {
        fresh = "{";
        copy = "{";
        for (std::size_t i = 0; i < fields.size(); ++i) {
            const std::string f(fields[i]);
            fresh.append(i == 0 ? "" : ", ").append(f).append(" = 0");
            copy.append(i == 0 ? "" : ", ").append(f).append(" = state.").append(f);
        }
        fresh.append("}");
        copy.append("}");
    }
    std::string carry = replaceAll(std::string(kLuaCarryOver), "#", n);
    carry = replaceAll(carry, "FRESH", fresh);
    carry = replaceAll(carry, "COPY", copy);
    carry = replaceAll(carry, "CAPACITY", model.bucket ? "burst" : "count");
    carry = replaceAll(carry, "UNITS", model.bucket ? kLuaBucketUnits.substr(1) : "");
    // The quota table is written last, once the glue shows which fields it reads.
    out.append("\n");
    std::string head = "local model" + n + " = " + std::string(model.name) + "\n";
    const std::size_t glueAt = out.size();
    // The state is read at the top level (a single model's script) or by `load` (a set's,
    // whose refusal reads an admitting member's state again).
    std::string indent;
    if (site.reloadable) {
        out.append("local function load").append(n).append("()\n");
        indent = "  ";
    }
    const auto line = [&](const std::string& text) {
        out.append(indent).append(text).append("\n");
    };
    // The stored limit, against this call's: `from` when they differ.
    const std::string differs = "if c ~= " + qn + ".count or b ~= " + qn + ".burst or p ~= " + qn +
                                ".period then from = {count = c, burst = b, period = p} end";
    line("local stored = redis.call('GET', " + key + ")");
    line("local state, from, carried");
    std::string encoded;  // the value `store` writes
    const std::string limitPack =
        "struct.pack('<ddd', " + qn + ".count, " + qn + ".burst, " + qn + ".period)";
    if (model.encodesState) {
        // Whole 16-byte records, then the limit: a value of 8 more than whole records has it.
        line("if stored then");
        line("  local size = #stored");
        line("  if size % 16 == 8 and size >= 24 then");
        line("    local c, b, p = struct.unpack('<ddd', stored, size - 23)");
        line("    stored = string.sub(stored, 1, size - 24)");
        line("    " + differs);
        line("  end");
        line("  state = model" + n + ".decode(stored)");
        line("end");
        line("if not state then state = model" + n + ".fresh() end");
        encoded = std::string(model.name) + ".encode(s) .. " + limitPack;
    } else {
        const std::string packing = "'<" + std::string(fields.size(), 'd') + "'";
        const std::string withLimit = "'<" + std::string(fields.size() + 3, 'd') + "'";
        std::string names;
        appendLuaList(names, fields, "state.");
        out.append(freshPlainState(definitions, fresh, names, site, indent));
        line("if stored then");
        line("  local size = #stored");
        line("  if size == " + std::to_string(8 * fields.size() + kStoredLimitBytes) + " then");
        line("    local c, b, p");
        line("    " + names + ", c, b, p = struct.unpack(" + withLimit + ", stored)");
        line("    " + differs);
        line("  elseif size == " + std::to_string(8 * fields.size()) + " then");
        line("    " + names + " = struct.unpack(" + packing + ", stored)");
        line("  end");
        line("end");
        encoded = "struct.pack(" + withLimit + ", ";
        appendLuaList(encoded, fields, "s.");
        encoded.append(", ").append(qn).append(".count, ").append(qn).append(".burst, ");
        encoded.append(qn).append(".period)");
    }
    std::string carryIndented;
    for (std::size_t at = 1; at < carry.size();) {  // past the leading newline
        const std::size_t endOfLine = carry.find('\n', at);
        carryIndented.append(indent).append(carry, at, endOfLine + 1 - at);
        at = endOfLine + 1;
    }
    out.append(carryIndented);
    if (site.reloadable) {
        out.append("  return state, carried\nend\nlocal state").append(n).append(", carried");
        out.append(n).append(" = load").append(n).append("()\n");
    } else if (!n.empty()) {
        out.append("local state").append(n).append(", carried").append(n);
        out.append(" = state, carried\n");
    }
    const std::size_t storeAt = definitions.size();
    definitions.append("local function store").append(n).append("(key, ").append(qn);
    definitions.append(
        ", s, keep)\n"
        "  if keep <= 0 then\n"
        "    redis.call('DEL', key)\n"
        "    return\n"
        "  end\n"
        "  redis.call('SET', key, ");
    definitions.append(encoded).append(", 'PX', fmt(ceildiv(keep, 1000) + 1))\nend\n");
    const std::string reads = std::string(code).append(out, glueAt).append(definitions, storeAt);
    std::string table = "{";
    std::string_view separator;
    for (std::size_t i = 0; i < quotaFields.size(); ++i) {
        if (!namesInLua(reads, quotaFields[i], "q.") &&
            !namesInLua(reads, quotaFields[i], qn + ".")) {
            continue;  // sent, but not read: a field costs the script a `tonumber` and a slot
        }
        table.append(separator).append(quotaFields[i]).append(" = tonumber(");
        table.append(quotaArgumentsIn(site.form)).append("[");
        table.append(std::to_string(site.argument + i)).append("])");
        separator = ", ";
    }
    table.append("}");
    if (site.form == ScriptForm::kEval) {
        head.append("local ").append(qn).append(" = ").append(table).append("\n");
    } else {
        const std::string kept = "quota[" + std::to_string(site.key) + "]";
        head.append("local ").append(qn).append(" = ").append(kept).append("\n");
        head.append("if not ").append(qn).append(" then\n  ").append(qn).append(" = ");
        head.append(table).append("\n  ").append(kept).append(" = ").append(qn);
        head.append("\nend\n");
    }
    out.insert(glueAt, head);
}

/// Checks that the model's names are Lua identifiers. Throws: `std::invalid_argument`.
inline void checkScriptNames(const ScriptModel& model,
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
    if (model.stateFields.empty()) {
        throwInvalidArgument("composeScript: a model's state has at least one field");
    }
}

/// The script, in `form`, of `body`: the models' Lua and what the glue defines once (its first
/// `modelsEnd` characters), then what runs on each call. The helpers the body uses go first. A
/// library (`kLibrary`) is named `ratelimit_<SHA-1 of its code>`, so that a library of that name on
/// a server is this one, and registers one function of that name (`libraryName`).
inline std::string finishScript(const std::string& body, std::size_t modelsEnd, ScriptForm form) {
    std::string code;
    appendLuaHelpers(code, body);
    if (form == ScriptForm::kEval) {
        return code.append(body);
    }
    code.append(body, 0, modelsEnd).append(kLuaLibraryTop);
    code.append("\nlocal function call(KEYS, ARGV)").append(body, modelsEnd).append("end\n");
    const std::string name = "ratelimit_" + sha1Hex(code);
    return "#!lua name=" + name + "\n" + code + "redis.register_function('" + name + "', call)\n";
}

/// The name of a library `finishScript` wrote, which is also its function's.
inline std::string_view libraryName(std::string_view library) noexcept {
    constexpr std::string_view kShebang = "#!lua name=";
    const std::size_t end = library.find('\n');
    return library.substr(kShebang.size(), end - kShebang.size());
}

/// What a call runs before its models' glue: its arguments, and in a library its quota's kept
/// tables.
inline void appendCallHead(std::string& body, ScriptForm form) {
    body.append(kLuaCall);
    if (form == ScriptForm::kLibrary) {
        std::string kept = replaceAll(std::string(kLuaQuotaOfCall), "QUOTA_IDENTITY",
                                      std::to_string(kQuotaIdentityArgument));
        body.append(replaceAll(std::move(kept), "QUOTAS_KEPT", std::to_string(kQuotasKept)));
    }
}

/// The script that runs one model's step, in `form`: the helpers it uses, the model's Lua
/// (defining the table `model.name`), the call's arguments, the model's glue, and the main
/// chunk. An EVAL script has no `#!lua` shebang (a shebang script that writes is refused
/// outright at `maxmemory`). `mainPieces` are the main chunk's, joined in order: `kLuaMain`,
/// or `kLuaLeaseMain` for a bucket's leases. Throws: `std::invalid_argument` when a name is
/// not a Lua identifier, or the state has no field.
inline std::string composeScript(const ScriptModel& model,
                                 std::span<const std::string_view> quotaFields,
                                 std::span<const std::string_view> mainPieces = kLuaMain,
                                 ScriptForm form = ScriptForm::kEval) {
    checkScriptNames(model, quotaFields);
    // Everything but the helpers, first, to see which helpers and quota fields it uses: the
    // model and its glue's definitions, then what runs on each call.
    std::string models;
    for (const std::string_view piece : model.lua) {
        models.append(piece);
    }
    std::string main;
    for (const std::string_view piece : mainPieces) {
        main.append(piece);
    }
    main = withReplyOutcomes(std::move(main));
    const std::string modelAndMain = models + main;
    std::string call;
    appendCallHead(call, form);
    GlueSite site;
    site.form = form;
    appendModelGlue(call, models, model, quotaFields, modelAndMain, site);
    call.append(main);
    return finishScript(models + call, models.size(), form);
}

/// The main chunk of a limit set's script (`LimitSetModel`; each member `i` has its glue with
/// the suffix `i`): the late-call rule at the latest of the members' last writes, every
/// member's step at one time, then the writes of all or nothing: every member's when all
/// admit (all but the members in dry-run: the quota argument `dryRunArgument` holds a `0` or `1`
/// per member, `LimitSetModel::QuotaType::dryRunMembers`), and otherwise a refusing member's rebase
/// alone (an admitting member reports its figures as they stand, from its state read again).
/// Returns {allowed 1/0, then per member: allowed 1/0, remaining, retry µs (-1 = never), reset
/// µs}; C++ picks the binding member and marks dry-run refusals (`LimitSetModel::bind`), so the
/// rule has one home. A refund (`ARGV[3] == '2'`) gives back up to the cost to every member and
/// answers their figures as they stand.
inline std::string setMain(std::size_t members, std::size_t dryRunArgument, ScriptForm form) {
    const auto each = [members](std::string& out, const std::string& line) {
        for (std::size_t i = 1; i <= members; ++i) {
            std::string text = line;
            for (std::size_t at = text.find('#'); at != std::string::npos;
                 at = text.find('#', at)) {
                text.replace(at, 1, std::to_string(i));
            }
            out.append(text);
        }
    };
    // How long member # keeps what it wrote: as a single model's script keeps it.
    const std::string keep =
        "(model#.keep and model#.keep(WRITTEN, q#, reset#, now) or reset#) + q#.lateTolerance";
    const auto keepOf = [&](const std::string& written) {
        std::string k = keep;
        for (std::size_t at = k.find("WRITTEN"); at != std::string::npos;
             at = k.find("WRITTEN", at)) {
            k.replace(at, std::string_view("WRITTEN").size(), written);
        }
        return k;
    };
    // The members' figures as the call's own time sees them, and the reply.
    const auto reply = [&](std::string& out) {
        each(out,
             "if late > 0 then\n"
             "  if retry# > 0 then retry# = retry# + late end\n"
             "  if reset# > 0 then reset# = reset# + late end\n"
             "end\n"
             "if remaining# < 0 then remaining# = 0 end\n");
        out.append("return {allowed and 1 or 0");
        each(out, ", allowed# and 1 or 0, remaining#, retry#, reset#");
        out.append("}\n");
    };
    std::string out = "\nlocal late = 0\nlocal last = nil\n";
    each(out,
         "local last# = model#.lastWrite(state#)\n"
         "if last# ~= nil and (last == nil or last# > last) then last = last# end\n");
    out.append(
        "if last ~= nil and now < last and last - now <= q1.lateTolerance then\n"
        "  late = last - now\n"
        "  now = last\n"
        "end\n"
        "local allowed = true\n");
    each(out, "local written#, allowed#, remaining#, retry#, reset#\n");
    // A refund: every member gives back up to the cost.
    out.append("if ARGV[3] == '2' then\n");
    each(out,
         "  local refunded# = model#.refund(state#, q#, now, cost)\n"
         "  written#, allowed#, remaining#, retry#, reset# = model#.step(state#, q#, now, 0)\n"
         "  if not refunded# and cost > 0 then refunded# = carried# end\n"
         "  if refunded# then store#(KEYS[#], q#, refunded#, " +
             keepOf("refunded#") + ") end\n");
    reply(out);
    out.append("end\n");
    each(out,
         "written#, allowed#, remaining#, retry#, reset# = model#.step(state#, q#, now, cost)\n");
    out.append("local dryRun = ").append(quotaArgumentsIn(form));
    out.append("[" + std::to_string(dryRunArgument) + "]\n");
    each(out, "allowed = allowed and (allowed# or string.sub(dryRun, #, #) == '1')\n");
    out.append("local consume = cost > 0 and ARGV[3] == '1'\n");
    // A member carried over from another limit is stored by a consuming call, as in memory.
    each(out,
         "local stored# = false\n"
         "if allowed then\n"
         "  if written# and consume then store#(KEYS[#], q#, written#, " +
             keepOf("written#") +
             ") stored# = true end\n"
             "elseif not allowed# then\n"
             "  if written# and consume then pcall(store#, KEYS[#], q#, written#, " +
             keepOf("written#") +
             ") stored# = true end\n"
             "else\n"
             "  written#, allowed#, remaining#, retry#, reset# = model#.step(load#(), q#, "
             "now, 0)\n"
             "end\n"
             "if carried# and consume and not stored# then pcall(store#, KEYS[#], q#, carried#, " +
             keepOf("carried#") + ") end\n");
    reply(out);
    return out;
}

/// The script of a limit set, in `form`: the helpers, each member model's Lua once (models
/// and pieces that members share are defined once), the call's arguments, each member's glue
/// (suffix, key and quota arguments `i`, its quota after the previous member's), and
/// `setMain`. Throws: `std::invalid_argument` as `composeScript`.
inline std::string composeSetScript(std::span<const ScriptModel> members,
                                    std::span<const std::string_view> quotaFields,
                                    ScriptForm form = ScriptForm::kEval) {
    std::string body;
    std::vector<const char*> pieces;
    for (const ScriptModel& m : members) {
        checkScriptNames(m, quotaFields);
        for (const std::string_view piece : m.lua) {
            if (std::find(pieces.begin(), pieces.end(), piece.data()) == pieces.end()) {
                pieces.push_back(piece.data());
                body.append(piece);
            }
        }
    }
    std::string call;
    appendCallHead(call, form);
    const std::string main =
        setMain(members.size(), kQuotaArgumentsStart + members.size() * quotaFields.size(), form);
    for (std::size_t i = 0; i < members.size(); ++i) {
        const GlueSite site{std::to_string(i + 1), i + 1,
                            kQuotaArgumentsStart + i * quotaFields.size(), true, form};
        std::string code;  // what reads this member's quota: its model, and the main chunk
        for (const std::string_view piece : members[i].lua) {
            code.append(piece);
        }
        appendModelGlue(call, body, members[i], quotaFields, code.append(main), site);
    }
    call.append(main);
    const std::size_t modelsEnd = body.size();
    return finishScript(body.append(call), modelsEnd, form);
}

/// `v` in decimal.
inline std::string decimal(std::int64_t v) { return std::string(DecimalText(v).view()); }

/// One call of a model's script.
struct ScriptCall {
    std::string_view now;  ///< µs in decimal, or empty: the script reads `TIME`
    std::int64_t cost = 0;
    StepMode mode = StepMode::kPeek;  ///< sent as its number (`ARGV[3]`)
    std::int64_t phase = 0;
};

/// Appends `verb` (`EVALSHA`, `EVAL`, or `FCALL` of a library's function) of `scriptOrSha` on
/// `keys` with the call's arguments in `kCallArguments` order, then the `quota` (its identity,
/// then its arguments: an `FCALL` sends the identity alone, `kLuaQuotaOfCall`), then
/// `trailing` (a lease's).
inline void appendScriptRequest(std::string& out, std::string_view verb,
                                std::string_view scriptOrSha, std::span<const std::string> keys,
                                const ScriptCall& call, std::span<const std::string> quota,
                                std::span<const std::string> trailing = {}) {
    if (verb == "FCALL") {
        quota = quota.first(1);
    }
    const DecimalText keyCount(keys.size());
    const std::array<std::string_view, 3> head{verb, scriptOrSha, keyCount.view()};
    const DecimalText cost(call.cost);
    const DecimalText mode(static_cast<std::int64_t>(call.mode));
    const DecimalText phase(call.phase);
    std::array<std::string_view, kCallArguments.size()> arguments;
    arguments[callArgument("now")] = call.now;
    arguments[callArgument("cost")] = cost.view();
    arguments[callArgument("consume")] = mode.view();
    arguments[callArgument("phase")] = phase.view();
    const auto forEach = [&](auto visit) {
        const auto each = [&](const auto& part) {
            for (const std::string_view a : part) {
                visit(a);
            }
        };
        each(head);
        each(keys);
        each(arguments);
        each(quota);
        each(trailing);
    };
    // Sized first, so the request is allocated once, not grown as it is written.
    std::size_t count = 0;
    std::size_t bytes = 1 + DecimalText::kMaxChars + 2;  // the header
    forEach([&](std::string_view a) {
        ++count;
        bytes += a.size() + kArgumentFraming;
    });
    out.reserve(out.size() + bytes);
    appendCommandHeader(out, count);
    forEach([&](std::string_view a) { appendArgument(out, a); });
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
