#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/step.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {

/// A penalty: once a key has earned `strikes` strikes within `within` of its first one, it is
/// blocked for `blockFor`, whatever it sends meanwhile. Every refusal of a consuming call is a
/// strike, and `Limiter::penalize(key, n)` gives `n` (a failed login, say).
/// Example: `Penalty{5, 15min, 15min}`: 5 failed logins in 15 minutes, then 15 minutes out.
/// Thread safety: thread-compatible value type.
struct Penalty {
    /// The most a penalty's durations may be: a year.
    static constexpr std::chrono::nanoseconds kMaxDuration = std::chrono::hours{24 * 366};

    std::int64_t strikes = 1;
    std::chrono::nanoseconds within{std::chrono::minutes{1}};
    std::chrono::nanoseconds blockFor{std::chrono::minutes{1}};

    /// Throws: `std::invalid_argument` naming the field: `strikes` outside 1…2^48, a duration
    /// outside 1 ns…366 days.
    void validate() const {
        if (strikes < 1 || strikes > Limit::kMaxCount) {
            detail::throwInvalidArgument("Penalty.strikes must be in 1..2^48 (got {})", {strikes});
        }
        checkDuration("within", within);
        checkDuration("blockFor", blockFor);
    }

    friend bool operator==(const Penalty&, const Penalty&) = default;

private:
    static void checkDuration(std::string_view field, std::chrono::nanoseconds d) {
        if (d.count() < 1 || d > kMaxDuration) {
            detail::throwInvalidArgument("Penalty.{} must be in 1ns..366 days (got {}ns)",
                                         {field, d.count()});
        }
    }
};

/// A penalty compiled for one clock tick (`PenalizedModel::QuotaType`).
struct PenaltyTicks {
    std::int64_t strikes = 1;
    Tick strikeWindow = 1;  ///< `Penalty::within`
    Tick blockTicks = 1;    ///< `Penalty::blockFor`
};

/// What a limiter of a `PenalizedModel` enforces: its limit, and the penalty on top.
template <class L>
struct PenalizedLimit {
    L limit;
    Penalty penalty;

    friend bool operator==(const PenalizedLimit&, const PenalizedLimit&) = default;
};

namespace detail {

/// `Prefix` then `Name`, as one constant: a penalized model's name.
template <Literal Prefix, const std::string_view& Name>
struct PrefixedName {
    static constexpr std::size_t kSize = Prefix.view().size() + Name.size();
    static constexpr std::array<char, kSize> kChars = [] {
        std::array<char, kSize> chars{};
        std::size_t at = 0;
        for (const char c : Prefix.view()) {
            chars[at++] = c;
        }
        for (const char c : Name) {
            chars[at++] = c;
        }
        return chars;
    }();
    static constexpr std::string_view kView{kChars.data(), kSize};
};

/// The penalty's step in Lua, around any model's table `inner` whose state is its fields (the
/// state table is flat: the inner model's fields, then `strikes` and `since`), line by line as
/// `PenalizedModel`. `penalizedOf(inner)` makes the model's table.
inline constexpr std::string_view kPenaltyLua = R"lua(
local function penalizedOf(inner)
  local m = {inner = inner}
  -- PenalizedModel::blockedFor: ticks left of a block, or 0.
  local function blockedFor(state, q, now)
    if state.strikes < 0 then
      local wait = state.since + q.blockTicks - now
      if wait > 0 then return wait end
    end
    return 0
  end
  local function strike(state, q, now, n)
    if state.strikes < 0 or (state.strikes > 0 and now - state.since >= q.strikeWindow) then
      state.strikes = 0
    end
    if state.strikes == 0 then state.since = now end
    if n >= q.strikes - state.strikes then
      state.strikes = -1
      state.since = now
      return true
    end
    state.strikes = state.strikes + n
    return false
  end
  -- A model's step may roll the state it is given in place and return it only when it
  -- writes, so it is given a copy: a refusal's strikes are stored, its roll is not.
  local function copyOf(state)
    local copy = {}
    for k, v in pairs(state) do copy[k] = v end
    return copy
  end
  function m.step(state, q, now, cost)
    local wait = blockedFor(state, q, now)
    if wait > 0 then
      local _, _, _, _, reset = inner.step(copyOf(state), q, now, 0)
      if reset < wait then reset = wait end
      if cost > q.capacity then wait = -1 end
      return nil, false, 0, wait, reset
    end
    local written, allowed, remaining, retry, reset = inner.step(copyOf(state), q, now, cost)
    if allowed or cost == 0 then return written, allowed, remaining, retry, reset end
    -- Refused: the strike is written, over the inner model's rebase if it made one.
    local struck = written or copyOf(state)
    local started = strike(struck, q, now, 1)
    if started then
      if retry >= 0 and retry < q.blockTicks then retry = q.blockTicks end
      if reset < q.blockTicks then reset = q.blockTicks end
    end
    return struck, allowed, remaining, retry, reset, started
  end
  function m.penalize(state, q, now, n)
    if n == 0 or blockedFor(state, q, now) > 0 then return nil end
    strike(state, q, now, n)
    return state
  end
  function m.refund(state, q, now, cost)
    return inner.refund(state, q, now, cost)
  end
  function m.lastWrite(state)
    local last = inner.lastWrite(state)
    if state.strikes ~= 0 and (last == nil or state.since > last) then return state.since end
    return last
  end
  function m.keep(state, q, reset, now)
    local keep = inner.keep and inner.keep(state, q, reset, now) or reset
    local left = 0
    if state.strikes < 0 then
      left = state.since + q.blockTicks - now
    elseif state.strikes > 0 then
      left = state.since + q.strikeWindow - now
    end
    if left > keep then keep = left end
    return keep
  end
  function m.carryPenalty(from, to)
    to.strikes, to.since = from.strikes, from.since
  end
  return m
end
)lua";

}  // namespace detail

/// A penalty (`Penalty`) around the model `M`: `M` decides as it does alone, and a key that
/// earns `strikes` strikes within `within` of its first is refused for `blockFor` from the
/// strike that completes them, whatever it sends meanwhile; a blocked key's calls change
/// nothing, so they never lengthen the block. A refusal of a consuming call with a cost above 0
/// is a strike, and so is each unit of `Limiter::penalize`. The strikes of a key count from
/// its first; once `within` has passed since then, the next strike starts a new count. A block
/// ends exactly `blockFor` after it began (a clock that steps back before the block's start
/// never shortens it); then the key meets `M`'s state as the block left it, with no strikes.
///
/// A decorator, not a wider entry for every limiter: the state is `M`'s, then the strike count
/// and the tick of the first strike (or of the block's start), 16 bytes more, only in the
/// limiters that have a penalty. A refusal that starts a block reports `retryAfter` of at least
/// `blockFor`; a blocked key's decision is refused with `remaining` 0 and the block's end as
/// its `retryAfter` (`kNever` for a cost above the limit).
///
/// In Redis, models whose state is its fields (every model but the sliding log) run their
/// penalty in the same script: one round trip per call, the block expiring with the key.
template <AlgorithmModel M>
requires std::is_same_v<QuotaOf<M>, Quota> && std::is_same_v<LimitOf<M>, Limit>
struct PenalizedModel {
    using Inner = M;
    static constexpr std::string_view kName = detail::PrefixedName<"penalized_", M::kName>::kView;
    static constexpr bool kBucket = M::kBucket;
    static constexpr int kStateVersion = M::kStateVersion;
    /// A refusal is a strike, which it writes (`detail::kRefusalsWrite`).
    static constexpr bool kRefusalsWrite = true;

    using Limits = PenalizedLimit<Limit>;

    struct State {
        typename M::State inner{};
        /// Strikes counted since `since`; -1 while blocked from `since`; 0 with no penalty.
        std::int64_t strikes = 0;
        Tick since = 0;
    };

    /// The inner model's quota, and the penalty's in ticks.
    struct QuotaType : Quota, PenaltyTicks {
        /// Compiles the limit for `M` (`Quota::make`) and the penalty for the tick. Throws:
        /// `std::invalid_argument` naming the field.
        template <class Self>
        static QuotaType make(const Limits& limits, std::int64_t nanosPerTick,
                              std::int64_t maxRunsPerKey, Tick lateToleranceTicks = 0) {
            limits.penalty.validate();
            QuotaType q;
            static_cast<Quota&>(q) =
                Quota::make<M>(limits.limit, nanosPerTick, maxRunsPerKey, lateToleranceTicks);
            q.strikes = limits.penalty.strikes;
            q.strikeWindow = ticksOf("within", limits.penalty.within, nanosPerTick);
            q.blockTicks = ticksOf("blockFor", limits.penalty.blockFor, nanosPerTick);
            return q;
        }

        /// Whether two quotas agree on the limit (`detail::sameQuota`) and on the penalty.
        friend bool operator==(const QuotaType& a, const QuotaType& b) noexcept {
            return detail::sameQuota(a, b) && a.strikes == b.strikes &&
                   a.strikeWindow == b.strikeWindow && a.blockTicks == b.blockTicks;
        }

    private:
        static Tick ticksOf(std::string_view field, std::chrono::nanoseconds d,
                            std::int64_t nanosPerTick) {
            if (d.count() % nanosPerTick != 0) {
                detail::throwInvalidArgument(
                    "Penalty.{} ({}ns) is not a whole number of ticks ({}ns: the clock's, or "
                    "whole microseconds with Redis)",
                    {field, d.count(), nanosPerTick});
            }
            return d.count() / nanosPerTick;
        }
    };

    static constexpr std::int64_t capacity(const Limits& limits) noexcept {
        return M::capacity(limits.limit);
    }

    static Decision step(State& state, const QuotaType& q, Tick now, std::int64_t cost) {
        if (const Tick wait = blockedFor(state, q, now); wait > 0) {
            typename M::State view = state.inner;
            Decision d = M::step(view, q, now, 0);
            const std::chrono::nanoseconds left{wait * q.nanosPerTick};
            d.allowed = false;
            d.remaining = 0;
            d.retryAfter = cost > q.capacity ? Decision::kNever : left;
            d.resetAfter = d.resetAfter < left ? left : d.resetAfter;
            return d;
        }
        Decision d = M::step(state.inner, q, now, cost);
        if (!d.allowed && cost > 0 && strike(state, q, now, 1)) {
            d.penaltyStarted = true;
            const std::chrono::nanoseconds block{q.blockTicks * q.nanosPerTick};
            if (!d.never() && d.retryAfter < block) {
                d.retryAfter = block;
            }
            d.resetAfter = d.resetAfter < block ? block : d.resetAfter;
        }
        return d;
    }

    /// Gives `n` strikes (`Limiter::penalize`); a blocked key's block stays as it is.
    static void penalize(State& state, const QuotaType& q, Tick now, std::int64_t n) {
        if (n > 0 && blockedFor(state, q, now) == 0) {
            (void)strike(state, q, now, n);
        }
    }

    static void refund(State& state, const QuotaType& q, Tick now,
                       std::int64_t cost) requires RefundableModel<M> {
        M::refund(state.inner, q, now, cost);
    }

    /// Carries the inner state over to the new limit (`detail::convertedState`); the strikes
    /// and a block stay, judged by the new penalty.
    static State convert(const State& state, const QuotaType& from, const QuotaType& to, Tick now) {
        State carried = state;
        carried.inner = detail::convertedState<M, Quota>(state.inner, from, to, now);
        return carried;
    }

    static bool isFresh(const State& state, const QuotaType& q, Tick now) {
        return M::isFresh(state.inner, q, now) && penaltyOver(state, q, now);
    }

    static Tick lastWrite(const State& state) noexcept {
        const Tick last = M::lastWrite(state.inner);
        return state.strikes != 0 && state.since > last ? state.since : last;
    }

    /// The inner model's range, its span widened to the penalty's durations.
    static ModelRange range(const QuotaType& q) noexcept {
        ModelRange r = M::range(q);
        const Tick longest = q.strikeWindow > q.blockTicks ? q.strikeWindow : q.blockTicks;
        r.span = r.span > longest ? r.span : detail::Int128{longest};
        return r;
    }

    /// The heap a key's inner state may hold (the sliding log's runs).
    static std::size_t heapBytes(const QuotaType& q) noexcept requires requires { M::heapBytes(q); }
    { return M::heapBytes(q); }

    /// The limit and penalty `q` was compiled from.
    static Limits limitOf(const QuotaType& q) {
        const auto nanos = [&](Tick ticks) {
            return std::chrono::nanoseconds{ticks * q.nanosPerTick};
        };
        return {detail::limitOfQuota(q),
                Penalty{q.strikes, nanos(q.strikeWindow), nanos(q.blockTicks)}};
    }

    /// The script's Lua: the inner model's, the penalty's, then this model's table
    /// (`local <kName> = penalizedOf(<M::kName>)`, in pieces: no constant joined at compile
    /// time).
    static constexpr auto kLua = [] {
        constexpr std::array<std::string_view, 6> kOwn{detail::kPenaltyLua, "local ", kName,
                                                       " = penalizedOf(",   M::kName, ")\n"};
        std::array<std::string_view, std::size(M::kLua) + kOwn.size()> pieces{};
        std::size_t at = 0;
        for (const std::string_view piece : M::kLua) {
            pieces[at++] = piece;
        }
        for (const std::string_view piece : kOwn) {
            pieces[at++] = piece;
        }
        return pieces;
    }();
    static constexpr std::array<std::string_view, std::size(M::kStateFields) + 2> kStateFields =
        [] {
            std::array<std::string_view, std::size(M::kStateFields) + 2> fields{};
            std::size_t at = 0;
            for (const std::string_view field : M::kStateFields) {
                fields[at++] = field;
            }
            fields[at++] = "strikes";
            fields[at++] = "since";
            return fields;
        }();

private:
    /// Ticks left of the key's block at `now`, or 0 when it is not blocked.
    static Tick blockedFor(const State& state, const QuotaType& q, Tick now) noexcept {
        if (state.strikes < 0) {
            const Tick wait = detail::satSub(detail::satAdd(state.since, q.blockTicks), now);
            return wait > 0 ? wait : 0;
        }
        return 0;
    }

    /// Whether the key has no strikes and no block left at `now`.
    static bool penaltyOver(const State& state, const QuotaType& q, Tick now) noexcept {
        if (state.strikes == 0) {
            return true;
        }
        const Tick span = state.strikes < 0 ? q.blockTicks : q.strikeWindow;
        return now >= state.since && now - state.since >= span;
    }

    /// Adds `n` strikes at `now`, starting a new count when the last one's window has passed
    /// (or a block has ended); true when they complete the count and start a block.
    static bool strike(State& state, const QuotaType& q, Tick now, std::int64_t n) noexcept {
        if (state.strikes < 0 ||
            (state.strikes > 0 && detail::satSub(now, state.since) >= q.strikeWindow)) {
            state.strikes = 0;
        }
        if (state.strikes == 0) {
            state.since = now;
        }
        if (n >= q.strikes - state.strikes) {
            state.strikes = -1;
            state.since = now;
            return true;
        }
        state.strikes += n;
        return false;
    }
};

namespace detail {

template <class M>
inline constexpr bool kIsPenalized = false;
template <class M>
inline constexpr bool kIsPenalized<PenalizedModel<M>> = true;

}  // namespace detail

}  // namespace v1
}  // namespace ratelimit
