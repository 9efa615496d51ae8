#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/run_log.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {

/// Sliding log: at most `count` in any window `(now − period, now]`; an entry made at `t`
/// stops counting at exactly `t + period`. Exact, with no edge burst; memory grows with the
/// number of distinct request times.
///
/// State: runs of (time, count), oldest first, merged when times are equal. At most
/// `Quota::maxRunsPerKey` runs: beyond it the two oldest merge at the later one's time, so
/// their entries expire later, never earlier (conservative: it never over-admits). 16 bytes
/// (a `detail::RunLog`), which hold a key's run while it has one; from its second run on, a room
/// on the heap of 16 bytes per run, at most twice the most runs held at once, and 16 for the sum
/// of their counts. In Redis, the key's value holds the runs, oldest first, each as two
/// little-endian IEEE doubles (time, count), exact below 2^53. Redis encoding version 1 was a
/// hash field of decimal text, which cost the script a parse and a print per value.
struct SlidingLogModel : WindowKind, ModelNames<"sliding_log", 2, "runs"> {
    using Run = detail::LogRun;
    using Runs = detail::RunLog;

    struct State {
        Runs runs;
    };

    /// Inline, and each path one call: out of line, its frame saved six registers for the step
    /// back's log on every call (38 instructions a call with the test, where the test alone is
    /// a handful).
    RATELIMIT_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                          std::int64_t cost) {
        if (state.runs.empty() || now >= state.runs.back().time) {
            return stepAt(state.runs, q, now, cost);
        }
        return stepBack(state, q, now, cost);
    }

    /// Gives back up to `cost` of the entries still counting at `now` (`Limiter::refund`), the
    /// newest first.
    static void refund(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        Runs& runs = state.runs;
        while (cost > 0 && !runs.empty() && detail::satSub(now, runs.back().time) < q.period) {
            const std::int64_t taken = cost < runs.back().count ? cost : runs.back().count;
            runs.takeFromNewest(taken);
            cost -= taken;
        }
    }

    /// Its Lua encodes its runs itself (`fresh`, `decode`, `encode`): their number varies.
    static constexpr bool kLuaEncodesState = true;

    /// The same model in Lua, line by line (composed into a script by the Redis storage): a
    /// step returns the state to store (nil when nothing changed), then the decision. Runs
    /// are tables {time, count}, as in C++; `decode` and `encode` read and write the key's
    /// value with Redis's bundled `struct` library, one call per 256 runs (nil: not a whole
    /// number of runs, read as fresh). Lua arrays count from 1.
    static constexpr std::array<std::string_view, 1> kLua{R"lua(
local sliding_log = {}
function sliding_log.step(state, q, now, cost)
  local runs = state.runs
  if #runs == 0 or now >= runs[#runs].time then
    return sliding_log.stepAt(state, q, now, cost)
  end
  -- A step back: answered from the log moved so that its newest entry sits at now.
  local moved = {runs = sliding_log.movedBack(runs, q, now)}
  local written, allowed, remaining, retry, reset = sliding_log.stepAt(moved, q, now, cost)
  if cost >= 1 and cost <= q.count then
    written = moved
  end
  return written, allowed, remaining, retry, reset
end
function sliding_log.stepAt(state, q, now, cost)
  local runs = state.runs
  local age = function(r) return now - r.time end
  local first = 1
  while first <= #runs and age(runs[first]) >= q.period do
    first = first + 1
  end
  local used = 0
  for i = first, #runs do
    used = used + runs[i].count
  end
  local reset = first <= #runs and q.period - age(runs[#runs]) or 0
  if cost > q.count then
    return nil, refusedForever(q.count - used, reset)
  end
  if used + cost <= q.count then
    local written = nil
    if cost > 0 then
      local kept = {}
      for i = first, #runs do
        kept[#kept + 1] = runs[i]
      end
      state.runs = kept
      sliding_log.append(state, now, cost, q.maxRunsPerKey)
      written = state
    end
    return written, admitted(q.count - used - cost, cost > 0 and q.period or reset)
  end
  -- The oldest runs whose expiry brings used + cost within count.
  local freed = 0
  local j = first
  while used - freed + cost > q.count do
    freed = freed + runs[j].count
    j = j + 1
  end
  return nil, refused(q.count - used, q.period - age(runs[j - 1]), reset)
end
function sliding_log.refund(state, q, now, cost)
  local runs = state.runs
  local written = nil
  while cost > 0 and #runs > 0 and now - runs[#runs].time < q.period do
    local newest = runs[#runs]
    local taken = math.min(cost, newest.count)
    newest.count = newest.count - taken
    cost = cost - taken
    if newest.count == 0 then runs[#runs] = nil end
    written = state
  end
  return written
end
function sliding_log.lastWrite(state)
  local runs = state.runs
  if #runs == 0 then return nil end
  return runs[#runs].time
end
function sliding_log.movedBack(runs, q, now)
  local newest = runs[#runs].time
  local moved = {}
  for _, r in ipairs(runs) do
    if newest - r.time < q.period then
      moved[#moved + 1] = {time = now - (newest - r.time), count = r.count}
    end
  end
  return moved
end
function sliding_log.append(state, now, cost, maxRuns)
  local runs = state.runs
  if #runs > 0 and runs[#runs].time == now then
    runs[#runs].count = runs[#runs].count + cost
    return
  end
  runs[#runs + 1] = {time = now, count = cost}
  if #runs > maxRuns then
    runs[2].count = runs[2].count + runs[1].count
    table.remove(runs, 1)
  end
end
function sliding_log.fresh()
  return {runs = {}}
end
-- 256 runs at a time: a Lua call returns at most about 8,000 values.
function sliding_log.decode(text)
  local n = #text / 16
  if n < 1 or n % 1 ~= 0 then
    return nil
  end
  local runs = {}
  local at = 1
  while #runs < n do
    local k = math.min(n - #runs, 256)
    local values = {struct.unpack('<' .. string.rep('d', 2 * k), text, at)}
    for i = 1, k do
      runs[#runs + 1] = {time = values[2 * i - 1], count = values[2 * i]}
    end
    at = values[2 * k + 1]
  end
  return {runs = runs}
end
function sliding_log.encode(state)
  local runs = state.runs
  local chunks = {}
  for first = 1, #runs, 256 do
    local values = {}
    for i = first, math.min(first + 255, #runs) do
      values[#values + 1] = runs[i].time
      values[#values + 1] = runs[i].count
    end
    chunks[#chunks + 1] = struct.pack('<' .. string.rep('d', #values), unpack(values))
  end
  return table.concat(chunks)
end
)lua"};

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return state.runs.empty() || (now >= state.runs.back().time &&
                                      detail::satSub(now, state.runs.back().time) >= q.period);
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.runs.empty() ? detail::kInt64Min : state.runs.back().time;
    }

    static ModelRange range(const Quota& q) noexcept { return {q.period, q.count}; }

    /// Most heap bytes one key's runs can hold (growth doubles the room: at most 2·(maxRuns + 1)
    /// runs, and the slot of their total).
    static std::size_t heapBytes(const Quota& q) noexcept {
        return (2 * static_cast<std::size_t>(q.maxRunsPerKey + 1) + 1) * sizeof(Run);
    }

private:
    /// A step back: the call is answered from the log moved so that its newest entry sits at
    /// `now`, so its waits are those of the log it leaves. The move is written even by a
    /// refusal; a peek or a cost above the capacity writes nothing.
    RATELIMIT_COLD static Decision stepBack(State& state, const Quota& q, Tick now,
                                            std::int64_t cost) {
        Runs moved = movedBack(state.runs, q, now);
        const Decision d = stepAt(moved, q, now, cost);
        if (cost >= 1 && cost <= q.count) {
            state.runs = std::move(moved);
        }
        return d;
    }

    /// The step at a time no earlier than the newest run. Out of line, where GCC used to put
    /// it: one copy serves both of `step`'s calls, and the sliding log's step keeps its shape
    /// whatever the inlining budget of the code around it.
    RATELIMIT_NOINLINE static Decision stepAt(Runs& runs, const Quota& q, Tick now,
                                              std::int64_t cost) {
        const auto age = [&](const Run& r) { return detail::satSub(now, r.time); };
        const Run* const held = runs.begin();  // the runs' form is read once
        const std::size_t n = runs.size();
        std::size_t first = 0;
        std::int64_t expired = 0;
        while (first < n && age(held[first]) >= q.period) {
            expired += held[first++].count;
        }
        const std::int64_t used = runs.total() - expired;
        const Tick reset = first < n ? q.period - age(held[n - 1]) : 0;
        if (cost > q.count) {
            return detail::refusedForever(q, q.count - used, reset);
        }
        if (used + cost <= q.count) {
            if (cost > 0) {
                runs.eraseFront(first);
                append(runs, now, cost, q.maxRunsPerKey);
            }
            return detail::admitted(q, q.count - used - cost, cost > 0 ? q.period : reset);
        }
        // The oldest runs whose expiry brings `used + cost` within `count`.
        std::int64_t freed = 0;
        std::size_t j = first;
        while (used - freed + cost > q.count) {
            freed += held[j++].count;
        }
        return detail::refused(q, q.count - used, q.period - age(held[j - 1]), reset);
    }

    /// The runs still counting at the newest one's time, moved so the newest sits at `now`
    /// (earlier than it), each keeping its age: ages count from the newest entry, never as
    /// `time - shift`, whose shift may not fit 64 bits. Below the clock's range a moved time
    /// stays at the range's floor: that entry is younger than it was, so it expires later,
    /// never earlier.
    static Runs movedBack(const Runs& runs, const Quota& q, Tick now) {
        const Tick newest = runs.back().time;
        Runs moved;
        moved.reserve(runs.size());
        for (const Run& r : runs) {
            const Tick age = detail::satSub(newest, r.time);
            if (age < q.period) {
                moved.append(Run{detail::satSub(now, age), r.count});
            }
        }
        return moved;
    }

    static void append(Runs& runs, Tick now, std::int64_t cost, std::int64_t maxRuns) {
        if (!runs.empty() && runs.back().time == now) {
            runs.addToNewest(cost);
            return;
        }
        if (static_cast<std::int64_t>(runs.size()) >= maxRuns) {
            runs.appendMergingOldest(Run{now, cost});  // the two oldest merge: the size stays
        } else {
            runs.append(Run{now, cost});
        }
    }
};

}  // namespace v1
}  // namespace ratelimit
