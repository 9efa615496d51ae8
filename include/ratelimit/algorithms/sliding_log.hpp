#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>

namespace ratelimit {
inline namespace v1 {

/// Sliding log: at most `count` in any window `(now − period, now]`; an entry made at `t`
/// stops counting at exactly `t + period`. Exact, with no edge burst; memory grows with the
/// number of distinct request times.
///
/// State: runs of (time, count), oldest first, merged when times are equal. At most
/// `Quota::maxRunsPerKey` runs: beyond it the two oldest merge at the later one's time, so
/// their entries expire later, never earlier (conservative: it never over-admits). 32 bytes
/// plus 16 per run.
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct SlidingLogModel {
    static constexpr std::string_view kName = "sliding_log";
    static constexpr bool kBucket = false;

    struct Run {
        Tick time = 0;
        std::int64_t count = 0;
    };

    struct State {
        std::vector<Run> runs;
    };

    static Decision step(State& state, const Quota& q, Tick now, std::int64_t cost) {
        auto& runs = state.runs;
        // After a step back the log shifts so its newest entry sits at `now`: ages then count
        // from the newest entry (never as `time - shift`, whose shift may not fit 64 bits).
        const bool steppedBack = !runs.empty() && now < runs.back().time;
        const Tick reference = steppedBack ? runs.back().time : now;
        const auto age = [&](const Run& r) { return detail::satSub(reference, r.time); };
        const auto expired = [&](const Run& r) { return age(r) >= q.period; };
        std::size_t first = 0;
        while (first < runs.size() && expired(runs[first])) {
            ++first;
        }
        std::int64_t used = 0;
        for (std::size_t i = first; i < runs.size(); ++i) {
            used += runs[i].count;
        }
        const Tick reset = first < runs.size() ? q.period - age(runs.back()) : 0;
        if (cost > q.count) {
            return detail::decision(q, false, q.count, q.count - used, detail::kNeverTicks, reset);
        }
        if (used + cost <= q.count) {
            if (cost > 0) {
                compact(runs, first, steppedBack, now);
                append(runs, now, cost, q.maxRunsPerKey);
            }
            return detail::decision(q, true, q.count, q.count - used - cost, 0,
                                    cost > 0 ? q.period : reset);
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
        return detail::decision(q, false, q.count, q.count - used, wait, reset);
    }

    /// The same step in Redis Lua (composed by `detail::composeScript`): the table
    /// `sliding_log` over one hash field `runs`, "time count" pairs oldest first, separated by
    /// spaces (written with `string.format('%d %d', …)`). A missing key is the empty log. Runs
    /// are Lua pairs `{time, count}`.
    static constexpr std::string_view kLua = R"lua(
local sliding_log = {}
function sliding_log.load(key)
  local v = redis.call('HMGET', key, 'runs')
  local runs = {}
  if v[1] then
    for t, c in string.gmatch(v[1], '(%-?%d+) (%d+)') do
      runs[#runs + 1] = {tonumber(t), tonumber(c)}
    end
  end
  return {runs = runs}
end
-- Drops the expired runs before first and applies the step-back shift.
function sliding_log.compact(s, first, shift)
  local kept = {}
  for i = first, #s.runs do
    kept[#kept + 1] = {s.runs[i][1] - shift, s.runs[i][2]}
  end
  s.runs = kept
end
function sliding_log.append(s, now, cost, maxRuns)
  local runs = s.runs
  local n = #runs
  if n > 0 and runs[n][1] == now then
    runs[n][2] = runs[n][2] + cost
    return
  end
  runs[n + 1] = {now, cost}
  if n + 1 > maxRuns then
    runs[2][2] = runs[2][2] + runs[1][2]
    table.remove(runs, 1)
  end
end
function sliding_log.lastWrite(s)
  local n = #s.runs
  if n == 0 then return nil end
  return s.runs[n][1]
end
function sliding_log.step(s, now, cost, p)
  local runs = s.runs
  local n = #runs
  -- After a step back the log shifts so its newest entry sits at now.
  local shift = 0
  if n > 0 and now < runs[n][1] then shift = runs[n][1] - now end
  local first = 1
  while first <= n and now - (runs[first][1] - shift) >= p.period do
    first = first + 1
  end
  local used = 0
  for i = first, n do
    used = used + runs[i][2]
  end
  local reset = 0
  if first <= n then reset = p.period - (now - (runs[n][1] - shift)) end
  if cost > p.count then
    return false, p.count - used, -1, reset, false
  end
  if used + cost <= p.count then
    if cost > 0 then
      sliding_log.compact(s, first, shift)
      sliding_log.append(s, now, cost, p.maxRuns)
      return true, p.count - used - cost, 0, p.period, true
    end
    return true, p.count - used, 0, reset, false
  end
  -- The oldest runs whose expiry brings used + cost within count.
  local freed = 0
  local j = first
  while used - freed + cost > p.count do
    freed = freed + runs[j][2]
    j = j + 1
  end
  local wait = p.period - (now - (runs[j - 1][1] - shift))
  if shift > 0 then
    sliding_log.compact(s, first, shift)
  end
  return false, p.count - used, wait, reset, shift > 0
end
function sliding_log.store(key, s, reset)
  if reset <= 0 or #s.runs == 0 then
    redis.call('DEL', key)
    return
  end
  local parts = {}
  for i = 1, #s.runs do
    parts[i] = string.format('%d %d', s.runs[i][1], s.runs[i][2])
  end
  redis.call('HSET', key, 'runs', table.concat(parts, ' '))
  keepFor(key, reset)
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
    /// Drops the expired runs before `first` and applies the step-back shift.
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
