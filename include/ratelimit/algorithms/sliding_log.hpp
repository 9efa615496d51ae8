#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {

/// Sliding log: at most `count` in any window `(now − period, now]`; an entry made at `t`
/// stops counting at exactly `t + period`. Exact, with no edge burst; memory grows with the
/// number of distinct request times.
///
/// State: runs of (time, count), oldest first, merged when times are equal. At most
/// `Quota::maxRunsPerKey` runs: beyond it the two oldest merge at the later one's time, so
/// their entries expire later, never earlier (conservative: it never over-admits). 24 bytes
/// (a vector) plus 16 per run.
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct SlidingLogModel : WindowKind {
    static constexpr std::string_view kName = "sliding_log";

    struct Run {
        Tick time = 0;
        std::int64_t count = 0;
    };

    struct State {
        std::vector<Run> runs;
    };
    /// `State`'s fields as the Redis script names them (one hash field: the runs as "time
    /// count" pairs, oldest first), and the version of that encoding, part of every key.
    static constexpr std::array<std::string_view, 1> kStateFields{"runs"};
    static constexpr int kStateVersion = 1;

    static Decision step(State& state, const Quota& q, Tick now, std::int64_t cost) {
        auto& runs = state.runs;
        // After a step back the log shifts so its newest entry sits at `now`: ages then count
        // from the newest entry (never as `time - shift`, whose shift may not fit 64 bits).
        const bool steppedBack = !runs.empty() && now < runs.back().time;
        const Tick reference = steppedBack ? runs.back().time : now;
        const auto age = [&](const Run& r) { return detail::satSub(reference, r.time); };
        std::size_t first = 0;
        while (first < runs.size() && age(runs[first]) >= q.period) {
            ++first;
        }
        std::int64_t used = 0;
        for (std::size_t i = first; i < runs.size(); ++i) {
            used += runs[i].count;
        }
        const Tick reset = first < runs.size() ? q.period - age(runs.back()) : 0;
        if (cost > q.count) {
            return detail::refusedForever(q, q.count - used, reset);
        }
        if (used + cost <= q.count) {
            if (cost > 0) {
                compact(runs, first, steppedBack, now);
                append(runs, now, cost, q.maxRunsPerKey);
            }
            return detail::admitted(q, q.count - used - cost, cost > 0 ? q.period : reset);
        }
        // The oldest runs whose expiry brings `used + cost` within `count`.
        std::int64_t freed = 0;
        std::size_t j = first;
        while (used - freed + cost > q.count) {
            freed += runs[j++].count;
        }
        const Tick wait = q.period - age(runs[j - 1]);
        if (steppedBack) {
            compact(runs, first, steppedBack, now);
        }
        return detail::refused(q, q.count - used, wait, reset);
    }

    /// The same model in Lua, line by line (composed into a script by the Redis storage): a
    /// step returns the decision and the state to store, or nil when nothing changed. Runs
    /// are tables {time, count}, as in C++; `decode` and `encode` read and write the hash
    /// field (written with `string.format('%d %d', …)`). Lua arrays count from 1.
    static constexpr std::string_view kLua = R"lua(
local sliding_log = {}
function sliding_log.step(state, q, now, cost)
  local runs = state.runs
  -- After a step back the log shifts so its newest entry sits at now.
  local steppedBack = #runs > 0 and now < runs[#runs].time
  local reference = steppedBack and runs[#runs].time or now
  local age = function(r) return reference - r.time end
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
    return refusedForever(q, q.count - used, reset), nil
  end
  if used + cost <= q.count then
    local written = nil
    if cost > 0 then
      sliding_log.compact(state, first, steppedBack, now)
      sliding_log.append(state, now, cost, q.maxRunsPerKey)
      written = state
    end
    return admitted(q, q.count - used - cost, cost > 0 and q.period or reset), written
  end
  -- The oldest runs whose expiry brings used + cost within count.
  local freed = 0
  local j = first
  while used - freed + cost > q.count do
    freed = freed + runs[j].count
    j = j + 1
  end
  local wait = q.period - age(runs[j - 1])
  local written = nil
  if steppedBack then
    sliding_log.compact(state, first, steppedBack, now)
    written = state
  end
  return refused(q, q.count - used, wait, reset), written
end
function sliding_log.lastWrite(state)
  local runs = state.runs
  if #runs == 0 then return nil end
  return runs[#runs].time
end
function sliding_log.compact(state, first, steppedBack, now)
  local kept = {}
  for i = first, #state.runs do
    kept[#kept + 1] = state.runs[i]
  end
  if steppedBack and #kept > 0 then
    local newest = kept[#kept].time
    for _, r in ipairs(kept) do
      r.time = now - (newest - r.time)
    end
  end
  state.runs = kept
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
function sliding_log.decode(fields)
  local runs = {}
  for t, c in string.gmatch(fields.runs, '(%-?%d+) (%d+)') do
    runs[#runs + 1] = {time = tonumber(t), count = tonumber(c)}
  end
  return {runs = runs}
end
function sliding_log.encode(state)
  local parts = {}
  for i, r in ipairs(state.runs) do
    parts[i] = string.format('%d %d', r.time, r.count)
  end
  return {runs = table.concat(parts, ' ')}
end
)lua";

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return state.runs.empty() || (now >= state.runs.back().time &&
                                      detail::satSub(now, state.runs.back().time) >= q.period);
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.runs.empty() ? detail::kInt64Min : state.runs.back().time;
    }

    static ModelRange range(const Quota& q) noexcept { return {q.period, q.count}; }

    /// Most heap bytes one key's runs can hold (a vector's growth may double its capacity).
    static std::size_t heapBytes(const Quota& q) noexcept {
        return 2 * static_cast<std::size_t>(q.maxRunsPerKey + 1) * sizeof(Run);
    }

private:
    /// Drops the expired runs; after a step back, moves the rest so the newest sits at `now`
    /// (each keeps its age, below the period, so only `now` minus it can saturate).
    static void compact(std::vector<Run>& runs, std::size_t first, bool steppedBack, Tick now) {
        runs.erase(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(first));
        if (steppedBack && !runs.empty()) {
            const Tick newest = runs.back().time;
            for (Run& r : runs) {
                r.time = detail::satSub(now, newest - r.time);
            }
        }
    }

    static void append(std::vector<Run>& runs, Tick now, std::int64_t cost, std::int64_t maxRuns) {
        if (!runs.empty() && runs.back().time == now) {
            runs.back().count += cost;
            return;
        }
        runs.push_back(Run{now, cost});
        if (static_cast<std::int64_t>(runs.size()) > maxRuns) {
            runs[1].count += runs[0].count;
            runs.erase(runs.begin());
        }
    }
};

}  // namespace v1
}  // namespace ratelimit
