// The Lua step of every model against its C++ step: a randomized differential test through a
// real redis-server, plus the script's own rules (TIME, binary keys, no shebang, maxmemory).
//
// Simulated time runs far faster than real time, so between steps the test PERSISTs the key
// and keeps its expiry in simulated time: the TTL the script sets is checked right after each
// write, and a key whose simulated TTL ran out must be fresh for the C++ model (then it is
// either deleted, as Redis would, or kept, to test stale states too). Even a MULTI cannot
// hold a 1 ms TTL until PERSIST (Redis 7.0 expires keys on real time inside EXEC), so the
// differential test runs the composed script verbatim as the body of a function in a test
// script that then reads the TTL and the hash and PERSISTs: within one script Redis freezes
// the expiry clock. The other tests EVAL the composed script itself.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/sliding_counter.hpp>
#include <ratelimit/algorithms/sliding_log.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/redis_script.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/storage/redis.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/packed_state.hpp"
#include "support/random_traffic.hpp"
#include "support/redis_server.hpp"
#include "support/redis_test_server.hpp"
#include "support/resp.hpp"

namespace {

namespace rt = ratelimit_test;
using ratelimit::Decision;
using ratelimit::FixedWindowModel;
using ratelimit::LeakyBucketModel;
using ratelimit::Limit;
using ratelimit::Quota;
using ratelimit::SlidingCounterModel;
using ratelimit::SlidingLogModel;
using ratelimit::Tick;
using ratelimit::TokenBucketModel;

constexpr std::int64_t kTwoPow53 = std::int64_t{1} << 53;
// |simulated time| stays below 2^52, so every difference of two times is below 2^53.
constexpr std::int64_t kTimeBound = std::int64_t{1} << 52;

std::string str(std::int64_t v) { return std::to_string(v); }

// ---- the C++ state as the key's value holds it (nullopt: the fresh state, no key) ----------

using Packed = std::optional<std::string>;

Packed valueOf(const TokenBucketModel::State& s) {
    if (s.last == 0 && s.deficit == 0) {
        return std::nullopt;
    }
    return rt::packedState({s.last, s.deficit});
}

Packed valueOf(const LeakyBucketModel::State& s) {
    return valueOf(static_cast<const TokenBucketModel::State&>(s));
}

Packed valueOf(const FixedWindowModel::State& s) {
    if (s.into == 0 && s.last == 0 && s.used == 0) {
        return std::nullopt;
    }
    return rt::packedState({s.last, s.into, s.used});
}

Packed valueOf(const SlidingCounterModel::State& s) {
    if (s.into == 0 && s.last == 0 && s.previous == 0 && s.current == 0) {
        return std::nullopt;
    }
    return rt::packedState({s.last, s.into, s.previous, s.current});
}

Packed valueOf(const SlidingLogModel::State& s) {
    if (s.runs.empty()) {
        return std::nullopt;
    }
    std::string runs;
    for (const auto& r : s.runs) {
        runs += rt::packedState({r.time, r.count});
    }
    return runs;
}

/// A written value as the scripts store it: the model's encoding, then the limit it was
/// written under (count, burst, period; `Limiter::setLimit` carries a state over from it).
Packed withLimit(const Packed& v, const Quota& q) {
    if (!v) {
        return v;
    }
    return *v + rt::packedState({q.count, q.burst, q.period});
}

/// The values, readable: "(fresh)" or the numbers in order.
std::string describe(const Packed& v) {
    if (!v) {
        return "(fresh)";
    }
    std::string out;
    for (const std::int64_t x : rt::unpackedState(*v)) {
        out += str(x);
        out += ' ';
    }
    return out + "(" + str(static_cast<std::int64_t>(v->size())) + " bytes)";
}

/// A GET reply: the value, or nullopt for no key.
Packed valueOf(const redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_STRING) {
        return std::nullopt;
    }
    return std::string(r->str, r->len);
}

// ---- the script and one call of it -----------------------------------------------------------

template <class Model>
const std::string& scriptOf() {
    static const std::string script = ratelimit::detail::composeScript(
        ratelimit::detail::scriptModel<Model>(), ratelimit::detail::kQuotaArgumentNames);
    return script;
}

/// The probe around one step, `step` (a Lua call): the step's reply, then the TTL, the value
/// and PERSIST in the same script. Returns {decision, PTTL, PEXPIRETIME (error before Redis 7),
/// value, TIME before the step, TIME after the TTL reads}.
std::string probeAround(std::string_view step) {
    return R"lua(
local before = redis.call('TIME')
local decision = )lua" +
           std::string(step) + R"lua(
local pttl = redis.call('PTTL', KEYS[1])
local expireTime = redis.pcall('PEXPIRETIME', KEYS[1])
local after = redis.call('TIME')
local value = redis.call('GET', KEYS[1])
redis.call('PERSIST', KEYS[1])
return {decision, pttl, expireTime, value, before, after}
)lua";
}

/// The composed script, verbatim, as a function body, in the probe.
template <class Model>
const std::string& probeScriptOf() {
    static const std::string script = "local function ratelimitStep()\n" + scriptOf<Model>() +
                                      "end\n" + probeAround("ratelimitStep()");
    return script;
}

/// The model's library with a second function, `probe`: the probe around the library's own
/// `call`. Loaded with `FUNCTION LOAD REPLACE`, called as `FCALL probe`.
template <class Model>
const std::string& probeLibraryOf() {
    static const std::string library =
        ratelimit::detail::composeScript(
            ratelimit::detail::scriptModel<Model>(), ratelimit::detail::kQuotaArgumentNames,
            ratelimit::detail::kLuaMain, ratelimit::detail::ScriptForm::kLibrary) +
        "redis.register_function('probe', function(KEYS, ARGV)" + probeAround("call(KEYS, ARGV)") +
        "end)\n";
    return library;
}

/// EVAL of `script` as the storage sends it (its own encoder): verb, script, numkeys, key,
/// then ARGV, the call's arguments and the quota's. `verb` `FCALL` takes a function's name.
std::vector<std::string> evalArgs(const std::string& script, std::string_view key,
                                  const std::string& now, std::int64_t cost, bool consume,
                                  std::int64_t phase, const Quota& q,
                                  std::string_view verb = "EVAL") {
    std::string request;
    const std::array<std::string, 1> keys{std::string(key)};
    ratelimit::detail::appendScriptRequest(
        request, verb, script, keys,
        {now, cost, consume ? ratelimit::StepMode::kConsume : ratelimit::StepMode::kPeek, phase},
        ratelimit::detail::quotaArguments<TokenBucketModel>(q));
    return rt::argvOf(request);
}

/// Where ARGV[i] (from 0) stands in `evalArgs`.
constexpr std::size_t kArgvStart = 4;

std::vector<std::string_view> views(const std::vector<std::string>& v) {
    return {v.begin(), v.end()};
}

/// A single model's reply (the client knows the limit: the script does not send it).
struct LuaDecision {
    bool allowed = false;
    std::int64_t remaining = 0;
    std::int64_t retry = 0;  // µs, -1 = never
    std::int64_t reset = 0;  // µs
};

/// Parses the script's reply; an empty optional and `error` on anything else.
std::optional<LuaDecision> parseDecision(const redisReply* r, std::string& error) {
    if (r == nullptr) {
        error = "no reply";
        return std::nullopt;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        error = std::string(r->str, r->len);
        return std::nullopt;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
        error = "not an array of 4";
        return std::nullopt;
    }
    std::array<std::int64_t, 4> v{};
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER) {
            error = "element is not an integer";
            return std::nullopt;
        }
        v[i] = r->element[i]->integer;
    }
    // A penalty's start is never the outcome of these plain models.
    if (v[0] != ratelimit::detail::kReplyAdmitted && v[0] != ratelimit::detail::kReplyRefused) {
        error = "outcome " + std::to_string(v[0]);
        return std::nullopt;
    }
    return LuaDecision{v[0] == ratelimit::detail::kReplyAdmitted, v[1], v[2], v[3]};
}

std::int64_t ceilMs(std::int64_t us) { return us / 1000 + (us % 1000 != 0 ? 1 : 0); }

/// How long a written key is kept, in µs: its resetAfter, and for a fixed window shifted by a
/// clock step also the time from its end to the next aligned edge (FixedWindowModel::isFresh).
template <class Model>
std::int64_t keepUs(const typename Model::State& stored, const Quota& q, std::int64_t reset) {
    if constexpr (std::is_same_v<Model, ratelimit::FixedWindowModel>) {
        const std::int64_t end = stored.last - stored.into + q.period;
        return reset + ((-end % q.period) + q.period) % q.period;
    } else {
        return reset;
    }
}

/// Empty when equal, else what differs.
std::string compare(const Decision& d, const LuaDecision& l) {
    std::ostringstream out;
    if (d.allowed != l.allowed) {
        out << "allowed C++ " << d.allowed << " Lua " << l.allowed << "; ";
    }
    if (d.remaining != l.remaining) {
        out << "remaining C++ " << d.remaining << " Lua " << l.remaining << "; ";
    }
    const bool never = d.retryAfter == Decision::kNever;
    if (never != (l.retry == -1) || (!never && d.retryAfter.count() != l.retry * 1000)) {
        out << "retry C++ " << (never ? std::string("never") : str(d.retryAfter.count()))
            << "ns Lua " << l.retry << "us; ";
    }
    if (d.resetAfter.count() != l.reset * 1000) {
        out << "reset C++ " << d.resetAfter.count() << "ns Lua " << l.reset << "us; ";
    }
    return out.str();
}

// ---- servers -----------------------------------------------------------------------------

using ratelimit_test::startServer;

rt::RedisContextPtr connectTo(const rt::RedisServer& server) {
    rt::RedisContextPtr c{server.connect()};
    REQUIRE(c != nullptr);
    REQUIRE(c->err == 0);
    return c;
}

// ---- random quotas and traffic -----------------------------------------------------------

using rt::logUniform;
using rt::Rng;
using rt::uniform;

std::int64_t gcd(std::int64_t a, std::int64_t b) {
    while (b != 0) {
        a = std::exchange(b, a % b);
    }
    return a;
}

struct Case {
    std::int64_t count;
    std::int64_t periodUs;
    std::int64_t burst;
};

/// Within the Redis bounds: count·period, burst·period/g and 2·period below 2^53 µs.
bool representable(const Case& c) {
    const auto product = [](std::int64_t a, std::int64_t b) {
        return static_cast<ratelimit::detail::Int128>(a) * b;
    };
    const std::int64_t g = gcd(c.count, c.periodUs);
    return product(c.count, c.periodUs) < kTwoPow53 &&
           product(c.burst, c.periodUs / g) < kTwoPow53 && c.periodUs <= (std::int64_t{1} << 49);
}

std::vector<Case> cases(Rng& rng) {
    constexpr std::int64_t kMax = Limit::kMaxCount;
    std::vector<Case> out = {
        {7, 1'000'000, 7},                  // 7/s
        {3, 10'000'000, 3},                 // 3 per 10 s
        {999'999, 3'600'000'000, 999'999},  // 999,999/h
        {7, 1'000'000, 3},                  // burst below count
        {7, 1'000'000, 20},                 // burst above count
        {3, 10'000'000, 1},
        {1, 1, 1},           // 1/µs
        {1000, 1000, 1000},  // unitsPerToken 1
        {13, 7, 5},
        {kMax, 31, kMax},  // count·period and capacity near 2^53
        {kMax, 31, 5},
        {std::int64_t{1} << 47, 63, std::int64_t{1} << 47},
        {5, std::int64_t{1} << 49, 2},  // long period
        {1, 60'000'000, 1},
    };
    while (out.size() < 40) {
        Case c{};
        c.count = uniform(rng, 0, 2) == 0 ? uniform(rng, 1, 20) : logUniform(rng, 1, kMax);
        const std::int64_t maxPeriod =
            std::min<std::int64_t>((kTwoPow53 - 1) / c.count, std::int64_t{1} << 49);
        c.periodUs = logUniform(rng, 1, maxPeriod);
        c.burst = uniform(rng, 0, 1) == 0 ? c.count : logUniform(rng, 1, kMax);
        if (representable(c)) {
            out.push_back(c);
        }
    }
    for (const Case& c : out) {
        REQUIRE(representable(c));
    }
    return out;
}

std::uint64_t seed() {
    // Read while the test case is single-threaded; nothing in the tests calls setenv.
    // NOLINTNEXTLINE(concurrency-mt-unsafe)
    if (const char* s = std::getenv("RATELIMIT_TEST_SEED"); s != nullptr) {
        return std::strtoull(s, nullptr, 10);
    }
    return 20240601;
}

// ---- the differential run ----------------------------------------------------------------

template <class Model>
struct Differential {
    redisContext* c = nullptr;
    Rng& rng;
    ratelimit::detail::ScriptForm form = ratelimit::detail::ScriptForm::kEval;
    std::int64_t steps = 0;
    std::int64_t admitted = 0;
    std::int64_t refused = 0;
    std::int64_t writes = 0;
    std::int64_t expiries = 0;
    std::int64_t stepsBack = 0;
    std::int64_t stalls = 0;  // see `stalled` below; expected 0 on an idle machine

    void run(const Case& cs, std::size_t index, int stepCount) {
        const std::int64_t maxRuns =
            std::vector<std::int64_t>{1, 2, 3, 5, 64}[static_cast<std::size_t>(uniform(rng, 0, 4))];
        const Limit limit =
            Limit::per(cs.count, std::chrono::microseconds{cs.periodUs}).withBurst(cs.burst);
        const Quota q = Quota::make<Model>(limit, 1000, maxRuns);
        const std::int64_t lim = q.capacity;
        const std::string key = "{rl-test-lua}:" + std::string(Model::kName) + ":" +
                                str(static_cast<std::int64_t>(index));
        REQUIRE(rt::command(c, {"DEL", key}) != nullptr);

        const std::int64_t phase = uniform(rng, 0, 2) == 0 ? 0 : uniform(rng, 0, q.period - 1);
        // Around the real epoch in µs, or around a ManualClock's zero (negative times too).
        std::int64_t t = uniform(rng, 0, 1) == 0
                             ? uniform(rng, 1'700'000'000'000'000, 1'700'100'000'000'000)
                             : uniform(rng, -3 * q.period, 3 * q.period);
        t = std::clamp(t, -kTimeBound / 2, kTimeBound / 2);
        const std::int64_t interval = std::max<std::int64_t>(1, q.period / q.count);

        typename Model::State state{};
        bool hasExpiry = false;  // the key exists, and Redis drops it at `expiry`
        Tick expiry = 0;         // (simulated time)
        Tick resetEnd = 0;       // the last write's now + resetAfter
        Tick lastWrite = 0;
        std::int64_t lastRemaining = lim;

        for (int i = 0; i < stepCount; ++i) {
            // Time: mostly forward, sometimes back by up to two periods.
            std::int64_t move = rt::randomMove(rng, q.period, interval);
            if (t + move > kTimeBound || t + move < -kTimeBound) {
                move = -move;
            }
            t += move;
            if (move < 0) {
                ++stepsBack;
            }
            const Tick now = t - phase;

            const std::int64_t cost = rt::randomCost(rng, lim, lastRemaining);
            const bool consume = uniform(rng, 0, 99) < 85;

            std::ostringstream context;
            context << Model::kName << " case " << index << " (count " << q.count << ", period "
                    << q.period << "us, burst " << q.burst << ", maxRuns " << q.maxRunsPerKey
                    << ", phase " << phase << ") step " << i << ": now " << now << " (raw " << t
                    << "), cost " << cost << ", consume " << consume << ", state "
                    << describe(valueOf(state));

            // The key's simulated TTL ran out: the C++ state must be fresh by then.
            if (hasExpiry && now >= expiry) {
                if (now >= lastWrite && !Model::isFresh(state, q, now)) {
                    FAIL(context.str()
                         << ": the key expires at " << expiry << " but the C++ state is not fresh");
                }
                if (uniform(rng, 0, 1) == 0) {
                    REQUIRE(rt::command(c, {"DEL", key}) != nullptr);
                    state = typename Model::State{};
                    hasExpiry = false;
                    ++expiries;
                }
            }

            const Packed before = withLimit(valueOf(state), q);
            Decision d;
            if (consume && cost > 0) {
                d = Model::step(state, q, now, cost);
            } else {
                typename Model::State copy = state;
                d = Model::step(copy, q, now, cost);
            }
            const Packed after = withLimit(valueOf(state), q);
            const bool wrote = after != before;

            const std::vector<std::string> args =
                form == ratelimit::detail::ScriptForm::kEval
                    ? evalArgs(probeScriptOf<Model>(), key, str(t), cost, consume, phase, q)
                    : evalArgs("probe", key, str(t), cost, consume, phase, q, "FCALL");
            const rt::RedisReplyPtr probe = rt::command(c, views(args));
            REQUIRE(probe != nullptr);
            if (probe->type == REDIS_REPLY_ERROR) {
                FAIL(context.str() << ": script failed: " << std::string(probe->str, probe->len));
            }
            REQUIRE(probe->type == REDIS_REPLY_ARRAY);
            REQUIRE(probe->elements == 6);
            const redisReply* evalReply = probe->element[0];
            const long long pttl = probe->element[1]->integer;
            const redisReply* expireTime = probe->element[2];
            const redisReply* value = probe->element[3];
            const auto ms = [](const redisReply* time) {
                return std::stoll(time->element[0]->str) * 1000 +
                       std::stoll(time->element[1]->str) / 1000;
            };
            const std::int64_t startMs = ms(probe->element[4]);
            const std::int64_t endMs = ms(probe->element[5]);

            std::string error;
            const std::optional<LuaDecision> l = parseDecision(evalReply, error);
            if (!l) {
                FAIL(context.str() << ": script failed: " << error);
            }
            if (const std::string diff = compare(d, *l); !diff.empty()) {
                FAIL(context.str() << ": " << diff);
            }
            // A script that stalled for a whole TTL on a busy machine may see Redis drop the
            // key it just wrote (the TTL counts from the millisecond the script started): not
            // the script's fault. The C++ state is put back and the run goes on.
            const std::int64_t keep = keepUs<Model>(state, q, l->reset);
            const std::int64_t ttlMs = ceilMs(keep) + 1;
            const bool stalled = wrote && endMs - startMs + 1 >= ttlMs;
            const Packed stored = valueOf(value);
            if (stalled && !stored && pttl == -2) {
                REQUIRE(rt::command(c, {"SET", key, *after}) != nullptr);
                ++stalls;
            } else if (stored != after) {
                FAIL(context.str() << ": Redis holds " << describe(stored) << ", C++ "
                                   << describe(after) << " (PTTL " << pttl << ", script ran in ["
                                   << startMs << ", " << endMs << "] ms)");
            }
            if (wrote && !stalled) {
                // The script set the TTL just now: ceil(reset) + 1 ms from Redis's command
                // time, a millisecond within the script's run (PTTL reads ceil(reset) once the
                // millisecond passed).
                bool ok = pttl >= 0 && pttl >= ttlMs - 2 - (endMs - startMs) && pttl <= ttlMs &&
                          (pttl > 0 || endMs - startMs + 2 >= ttlMs);
                if (expireTime->type == REDIS_REPLY_INTEGER) {
                    ok = ok && expireTime->integer >= startMs - 1 + ttlMs &&
                         expireTime->integer <= endMs + ttlMs;
                }
                if (!ok) {
                    FAIL(context.str()
                         << ": PTTL " << pttl << " (expires at " << expireTime->integer
                         << ", script ran in [" << startMs << ", " << endMs
                         << "] ms) after a write with reset " << l->reset << "us");
                }
            }
            if (wrote) {
                // From here on the key is kept in simulated time; it must be fresh by
                // now + keep (Redis keeps it up to 1 ms longer, harmlessly).
                expiry = now + keep;
                resetEnd = now + l->reset;
                hasExpiry = true;
                lastWrite = now;
                ++writes;
            } else {
                const long long expected = after ? -1 : -2;  // persisted, or no key
                if (pttl != expected) {
                    FAIL(context.str()
                         << ": PTTL " << pttl << " without a write (expected " << expected << ")");
                }
                // Nothing written since the last write: resetAfter counts down with the clock.
                // (An admitted peek reports the reset after its cost, as if consumed.)
                if (after && hasExpiry && now < resetEnd && now >= lastWrite &&
                    (cost == 0 || !l->allowed) && resetEnd - now != l->reset) {
                    FAIL(context.str() << ": " << (resetEnd - now)
                                       << "us left of the last write's resetAfter, but reset "
                                       << l->reset << "us");
                }
            }
            if (after && !hasExpiry) {
                FAIL(context.str() << ": a key without TTL");
            }
            lastRemaining = l->remaining;
            (l->allowed ? admitted : refused) += 1;
            ++steps;
        }
        REQUIRE(rt::command(c, {"DEL", key}) != nullptr);
    }
};

}  // namespace

TEMPLATE_TEST_CASE("Redis Lua: each model's script makes exactly the C++ step's decisions",
                   "[redis_lua][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    REQUIRE(rt::command(c.get(), {"DEBUG", "SET-ACTIVE-EXPIRE", "0"}) != nullptr);

    // Sent whole (EVAL) and as a function library (FCALL), which keeps each quota it read.
    const auto form =
        GENERATE(ratelimit::detail::ScriptForm::kEval, ratelimit::detail::ScriptForm::kLibrary);
    if (form == ratelimit::detail::ScriptForm::kLibrary) {
        const rt::RedisReplyPtr loaded =
            rt::command(c.get(), {"FUNCTION", "LOAD", "REPLACE", probeLibraryOf<TestType>()});
        REQUIRE(loaded != nullptr);
        INFO((loaded->type == REDIS_REPLY_ERROR ? std::string(loaded->str, loaded->len) : ""));
        REQUIRE(loaded->type == REDIS_REPLY_STRING);
    }
    Rng rng(seed() ^ std::hash<std::string_view>{}(TestType::kName));
    Differential<TestType> diff{c.get(), rng, form};
    const std::vector<Case> all = cases(rng);
    for (std::size_t i = 0; i < all.size(); ++i) {
        diff.run(all[i], i, 300);
    }
    INFO("steps " << diff.steps << ", admitted " << diff.admitted << ", refused " << diff.refused
                  << ", writes " << diff.writes << ", expiries " << diff.expiries << ", steps back "
                  << diff.stepsBack << ", stalled scripts " << diff.stalls);
    REQUIRE(diff.steps >= 10'000);
    REQUIRE(diff.admitted > diff.steps / 10);
    REQUIRE(diff.refused > diff.steps / 10);
    REQUIRE(diff.expiries > 0);
    REQUIRE(diff.stepsBack > diff.steps / 20);
    REQUIRE(diff.stalls < diff.steps / 100);
}

TEST_CASE("Redis requests: RESP byte for byte, numbers at their extremes", "[redis_lua][redis]") {
    // As strings: Catch2 v2 prints a string_view only where its main was built for one.
    const auto digits = [](auto v) {
        return std::string(ratelimit::detail::DecimalText(v).view());
    };
    constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
    CHECK(digits(0) == "0");
    CHECK(digits(-1) == "-1");
    CHECK(digits(kMin) == "-9223372036854775808");
    CHECK(digits(std::numeric_limits<std::int64_t>::max()) == "9223372036854775807");
    CHECK(digits(std::numeric_limits<std::uint64_t>::max()) == "18446744073709551615");

    // A key holding the protocol's own line end, an empty time (the script reads TIME), a
    // negative cost and the lowest phase: each goes with its length, in ARGV order, after what
    // the buffer held.
    const std::array<std::string, 1> keys{std::string("a\r\nb")};
    const std::array<std::string, 2> quota{"q1", "q2"};
    const std::array<std::string, 1> trailing{"t"};
    const ratelimit::detail::ScriptCall call{"", -5, ratelimit::StepMode::kConsume, kMin};
    std::string request = "+held\r\n";
    ratelimit::detail::appendScriptRequest(request, "FCALL", "f", keys, call, quota, trailing);
    CHECK(request ==
          "+held\r\n*10\r\n$5\r\nFCALL\r\n$1\r\nf\r\n$1\r\n1\r\n$4\r\na\r\nb\r\n"
          "$0\r\n\r\n$2\r\n-5\r\n$1\r\n1\r\n$20\r\n-9223372036854775808\r\n$2\r\nq1\r\n"
          "$1\r\nt\r\n");
    // An EVALSHA sends the whole quota, and a set's keys in their order.
    const std::array<std::string, 2> twoKeys{"k0", "k1"};
    const ratelimit::detail::ScriptCall now{"1700000000000000", 0, ratelimit::StepMode::kPeek, 0};
    std::string evalsha;
    ratelimit::detail::appendScriptRequest(evalsha, "EVALSHA", "abc", twoKeys, now, quota);
    CHECK(evalsha ==
          "*11\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n2\r\n$2\r\nk0\r\n$2\r\nk1\r\n"
          "$16\r\n1700000000000000\r\n$1\r\n0\r\n$1\r\n0\r\n$1\r\n0\r\n$2\r\nq1\r\n"
          "$2\r\nq2\r\n");
}

TEST_CASE("Redis Lua: an FCALL sends the quota's identity alone, read once per identity",
          "[redis_lua][redis]") {
    using ratelimit::detail::kCallArguments;
    const Quota q = Quota::make<TokenBucketModel>(Limit::perSecond(5), 1000, 64);
    const std::vector<std::string> quota = ratelimit::detail::quotaArguments<TokenBucketModel>(q);
    REQUIRE(quota.size() > 2);
    const std::array<std::string, 1> keys{"{rl-test-lua}:identity"};
    const std::array<std::string, 2> lease{"host", "7"};
    const ratelimit::detail::ScriptCall call{"", 1, ratelimit::StepMode::kConsume, 0};
    const auto sent = [&](std::string_view verb, std::span<const std::string> trailing) {
        std::string request;
        ratelimit::detail::appendScriptRequest(request, verb, "f", keys, call, quota, trailing);
        return rt::argvOf(request);
    };
    // verb, function or script, the number of keys, the key, then ARGV.
    const std::size_t head = 4 + kCallArguments.size();
    const std::vector<std::string> fcall = sent("FCALL", lease);
    REQUIRE(fcall.size() == head + 1 + lease.size());
    CHECK(fcall[head] == quota[0]);
    CHECK(fcall[head + 1] == lease[0]);
    CHECK(fcall[head + 2] == lease[1]);
    // An EVALSHA sends every argument: its script reads them on every call.
    const std::vector<std::string> evalsha = sent("EVALSHA", {});
    REQUIRE(evalsha.size() == head + quota.size());
    CHECK(std::equal(quota.begin(), quota.end(), evalsha.begin() + static_cast<long>(head)));

    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    const std::string library = ratelimit::detail::composeScript(
        ratelimit::detail::scriptModel<TokenBucketModel>(), ratelimit::detail::kQuotaArgumentNames,
        ratelimit::detail::kLuaMain, ratelimit::detail::ScriptForm::kLibrary);
    const rt::RedisReplyPtr loaded = rt::command(c.get(), {"FUNCTION", "LOAD", "REPLACE", library});
    REQUIRE(loaded != nullptr);
    REQUIRE(loaded->type == REDIS_REPLY_STRING);
    const std::string name(ratelimit::detail::libraryName(library));
    // Each key's first call: a quota the library has not read, then one it has, then another.
    const Quota other = Quota::make<TokenBucketModel>(Limit::perSecond(9), 1000, 64);
    const std::array<std::pair<const char*, const Quota*>, 3> calls{
        {{"{rl-test-lua}:a", &q}, {"{rl-test-lua}:b", &q}, {"{rl-test-lua}:c", &other}}};
    for (const auto& [key, limit] : calls) {
        INFO(key);
        const rt::RedisReplyPtr r =
            rt::command(c.get(), views(evalArgs(name, key, "", 2, true, 0, *limit, "FCALL")));
        std::string error;
        const std::optional<LuaDecision> l = parseDecision(r.get(), error);
        INFO(error);
        REQUIRE(l);
        CHECK(l->allowed);
        CHECK(l->remaining == limit->capacity - 2);
    }
}

TEST_CASE("Redis Lua: idiv, ceildiv and imod are exact up to 2^53", "[redis_lua][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    using ratelimit::detail::Int128;
    Rng rng(seed());
    const std::int64_t top = kTwoPow53 - 1;
    std::vector<std::pair<std::int64_t, std::int64_t>> pairs = {
        {top, 3},     {top, 7},
        {top - 1, 2}, {top, (std::int64_t{1} << 52) + 1},
        {-top, 3},    {-top, 7},
        {top, -3},    {-top, -3},
        {0, 5},       {0, -5},
        {-1, 5},      {1, -5},
        {top, top},   {top - 1, top},
        {-top, top},  {top, 1},
        {-top, 1},    {(std::int64_t{1} << 52) + 3, 3},
    };
    // Quotients a hair from a whole number at the top of the range, where rounding the
    // quotient would first carry it onto one: a = q·b − 1, q·b, q·b + 1 for the largest q.
    for (const std::int64_t b :
         {std::int64_t{2}, std::int64_t{3}, std::int64_t{7}, std::int64_t{1000},
          (std::int64_t{1} << 26) + 1, (std::int64_t{1} << 40) - 3, (std::int64_t{1} << 52) + 3}) {
        const std::int64_t whole = top / b * b;
        for (const std::int64_t a : {whole - 1, whole, whole + 1}) {
            if (a <= top) {
                pairs.emplace_back(a, b);
                pairs.emplace_back(-a, b);
            }
        }
    }
    while (pairs.size() < 3000) {
        const std::int64_t b =
            uniform(rng, 0, 1) == 0 ? uniform(rng, 1, 1000) : logUniform(rng, 1, top);
        const std::int64_t a =
            uniform(rng, 0, 1) == 0 ? uniform(rng, top - 100000, top) : logUniform(rng, 1, top);
        pairs.emplace_back(uniform(rng, 0, 3) == 0 ? -a : a, uniform(rng, 0, 5) == 0 ? -b : b);
    }
    const std::string loop = R"lua(
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = idiv(a, b)
  out[#out + 1] = ceildiv(a, b)
  out[#out + 1] = imod(a, b)
end
return out
)lua";
    std::string body;
    ratelimit::detail::appendLuaHelpers(body, loop);
    body.append(loop);
    std::vector<std::string> args = {"EVAL", body, "0"};
    for (const auto& [a, b] : pairs) {
        args.push_back(str(a));
        args.push_back(str(b));
    }
    const rt::RedisReplyPtr r = rt::command(c.get(), views(args));
    REQUIRE(r != nullptr);
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 3 * pairs.size());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        const auto [a, b] = pairs[i];
        Int128 q = Int128{a} / b;
        if (Int128{a} % b != 0 && ((a < 0) != (b < 0))) {
            --q;
        }
        const Int128 ceil =
            (Int128{a} % b != 0 && ((a < 0) == (b < 0))) ? Int128{a} / b + 1 : Int128{a} / b;
        const Int128 mod = Int128{a} - q * b;
        const auto got = [&](std::size_t k) { return Int128{r->element[3 * i + k]->integer}; };
        if (got(0) != q || got(1) != ceil || got(2) != mod) {
            if (++wrong <= 5) {
                UNSCOPED_INFO("a " << a << " b " << b << ": idiv " << static_cast<long long>(got(0))
                                   << " ceildiv " << static_cast<long long>(got(1)) << " imod "
                                   << static_cast<long long>(got(2)));
            }
        }
    }
    REQUIRE(wrong == 0);
}

TEMPLATE_TEST_CASE("Redis Lua: the script reads TIME when ARGV[1] is empty", "[redis_lua][redis]",
                   RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    const auto serverTime = [&] {
        const rt::RedisReplyPtr r = rt::command(c.get(), {"TIME"});
        REQUIRE(r != nullptr);
        REQUIRE(r->type == REDIS_REPLY_ARRAY);
        return std::stoll(r->element[0]->str) * 1'000'000 + std::stoll(r->element[1]->str);
    };
    const Quota q = Quota::make<TestType>(Limit::perSecond(5), 1000, 64);
    const std::int64_t lim = q.capacity;
    const std::string key = "{rl-test-lua}:time:" + std::string(TestType::kName);
    const std::int64_t phase = 123'456;

    const std::int64_t before = serverTime();
    const rt::RedisReplyPtr r =
        rt::command(c.get(), views(evalArgs(scriptOf<TestType>(), key, "", 2, true, phase, q)));
    const std::int64_t after = serverTime();
    std::string error;
    const std::optional<LuaDecision> l = parseDecision(r.get(), error);
    INFO(error);
    REQUIRE(l);
    CHECK(l->allowed);
    CHECK(l->remaining == lim - 2);
    CHECK(l->retry == 0);

    const rt::RedisReplyPtr ttl = rt::command(c.get(), {"PTTL", key});
    REQUIRE(ttl != nullptr);
    CHECK(ttl->integer > 0);
    CHECK(ttl->integer <= ceilMs(l->reset) + 1);
    // The stored time is the server's, minus the phase.
    // (Every model's first packed value is a time: `last`, or the sliding log's first run's.)
    const rt::RedisReplyPtr stored = rt::command(c.get(), {"GET", key});
    REQUIRE(stored != nullptr);
    REQUIRE(stored->type == REDIS_REPLY_STRING);
    const std::vector<std::int64_t> values = rt::unpackedState({stored->str, stored->len});
    REQUIRE_FALSE(values.empty());
    const std::int64_t storedTime = values[0];
    CHECK(storedTime >= before - phase);
    CHECK(storedTime <= after - phase);
    // That is the time the step ran at: the C++ step there gives the same decision.
    typename TestType::State fresh{};
    CHECK(compare(TestType::step(fresh, q, storedTime, 2), *l).empty());
}

TEST_CASE("Redis Lua: the sliding log keeps more runs than one Lua call can return",
          "[redis_lua][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    // A Lua 5.1 call returns at most about 8,000 values (LUAI_MAXCSTACK): 4,500 runs are 9,000
    // doubles, and one more call merges the two oldest.
    constexpr std::int64_t kRuns = 4500;
    const Quota q =
        Quota::make<SlidingLogModel>(Limit::per(2 * kRuns, std::chrono::hours(1)), 1000, kRuns);
    const std::int64_t base = 10'000'000'000;
    SlidingLogModel::State state;
    for (std::int64_t i = 0; i < kRuns; ++i) {
        state.runs.append({base + 10 * i, 1});
    }
    const std::string key = "{rl-test-lua}:many-runs";
    REQUIRE(rt::command(c.get(), {"SET", key, *valueOf(state)}) != nullptr);

    const std::int64_t now = base + 10 * kRuns;
    const Decision d = SlidingLogModel::step(state, q, now, 2);
    REQUIRE(d.allowed);
    REQUIRE(state.runs.size() == static_cast<std::size_t>(kRuns));
    const rt::RedisReplyPtr r = rt::command(
        c.get(), views(evalArgs(scriptOf<SlidingLogModel>(), key, str(now), 2, true, 0, q)));
    std::string error;
    const std::optional<LuaDecision> l = parseDecision(r.get(), error);
    INFO(error);
    REQUIRE(l);
    CHECK(compare(d, *l).empty());
    const rt::RedisReplyPtr stored = rt::command(c.get(), {"GET", key});
    CHECK(valueOf(stored.get()) == withLimit(valueOf(state), q));
}

TEMPLATE_TEST_CASE("Redis Lua: any byte string is a key", "[redis_lua][redis]",
                   RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    const Quota q = Quota::make<TestType>(Limit::perMinute(3), 1000, 64);

    std::string key("{rl-test-lua}:\0 \r\n{x}} %d %s \x01\xff", 30);
    while (key.size() < std::size_t{64} * 1024) {
        key += static_cast<char>(key.size() % 256);
    }
    std::string twin = key;
    twin.back() = static_cast<char>(twin.back() ^ 1);  // differs only after NULs and CR/LF

    const auto call = [&](const std::string& k, std::int64_t cost) {
        const rt::RedisReplyPtr r = rt::command(
            c.get(), views(evalArgs(scriptOf<TestType>(), k, "5000000", cost, true, 0, q)));
        std::string error;
        auto d = parseDecision(r.get(), error);
        INFO(error);
        REQUIRE(d);
        return *d;
    };
    CHECK(call(key, 2).remaining == 1);
    CHECK(call(key, 1).remaining == 0);
    CHECK_FALSE(call(key, 1).allowed);
    CHECK(call(twin, 1).remaining == 2);  // a separate key

    const rt::RedisReplyPtr exists = rt::command(c.get(), {"EXISTS", key, twin});
    REQUIRE(exists != nullptr);
    CHECK(exists->integer == 2);
    const rt::RedisReplyPtr ttl = rt::command(c.get(), {"PTTL", key});
    REQUIRE(ttl != nullptr);
    CHECK(ttl->integer > 0);
    const rt::RedisReplyPtr scan = rt::command(c.get(), {"KEYS", "*"});
    REQUIRE(scan != nullptr);
    REQUIRE(scan->type == REDIS_REPLY_ARRAY);
    REQUIRE(scan->elements == 2);
    for (std::size_t i = 0; i < scan->elements; ++i) {
        const std::string k(scan->element[i]->str, scan->element[i]->len);
        CHECK((k == key || k == twin));
    }
}

TEMPLATE_TEST_CASE("Redis Lua: the script follows the Lua rules", "[redis_lua][redis]",
                   RATELIMIT_TEST_MODELS) {
    const std::string& script = scriptOf<TestType>();
    // No shebang: a shebang script with writes is refused outright at maxmemory.
    CHECK(script.find("#!") == std::string::npos);
    // Numbers become strings only through string.format('%d', …).
    CHECK(script.find("tostring") == std::string::npos);
    CHECK(script.find("PEXPIREAT") == std::string::npos);
    // No rounded division outside the helpers, whose short road is exact where it is taken.
    std::string outsideHelpers = script;
    for (const auto& helper : ratelimit::detail::kLuaHelpers) {
        if (const std::size_t at = outsideHelpers.find(helper.lua); at != std::string::npos) {
            outsideHelpers.erase(at, helper.lua.size());
        }
    }
    CHECK(outsideHelpers.find("math.floor(a / b)") == std::string::npos);
    CHECK(outsideHelpers.find("math.ceil(") == std::string::npos);
    CHECK_THROWS_AS(
        ratelimit::detail::composeScript({"no such", TestType::kLua, TestType::kStateFields},
                                         ratelimit::detail::kQuotaArgumentNames),
        std::invalid_argument);
}

// How a script tells which helpers and quota fields it uses.
static_assert(ratelimit::detail::namesInLua("local r = fmod(a, b)", "fmod"));
static_assert(!ratelimit::detail::namesInLua("local fmod = math.fmod", "imod"));
static_assert(!ratelimit::detail::namesInLua("x = math.fmod(a, b)", "fmod"));
static_assert(!ratelimit::detail::namesInLua("x = fmodx(a, b)", "fmod"));
static_assert(ratelimit::detail::namesInLua("return q.count - used", "count", "q."));
static_assert(!ratelimit::detail::namesInLua("return q.countx", "count", "q."));
static_assert(!ratelimit::detail::namesInLua("return aq.count", "count", "q."));
static_assert(!ratelimit::detail::namesInLua("return count", "count", "q."));

TEMPLATE_TEST_CASE("Redis Lua: a script defines only the helpers and quota fields it uses",
                   "[redis_lua][redis]", RATELIMIT_TEST_MODELS) {
    // Each `local function` is a closure made on every call, and each quota field a
    // `tonumber`: the server pays for what a script defines, used or not.
    const std::string& script = scriptOf<TestType>();
    std::string model;
    for (const std::string_view piece : TestType::kLua) {
        model.append(piece);
    }
    for (const auto& helper : ratelimit::detail::kLuaHelpers) {
        const std::string name(helper.name);
        CAPTURE(name);
        const bool defined = script.find(helper.lua) != std::string::npos;
        CHECK(defined ==
              (ratelimit::detail::namesInLua(model, helper.name) || helper.name == "ceildiv" ||
               helper.name == "fmt"));  // `store` rounds its TTL up and formats it
    }
    for (const std::string_view field : ratelimit::detail::kQuotaArgumentNames) {
        const std::string name(field);
        CAPTURE(name);
        const bool read = script.find(name + " = tonumber(ARGV[") != std::string::npos;
        // The main chunk's, and the limit each value records (`Limiter::setLimit`).
        const bool always = field == "capacity" || field == "lateTolerance" || field == "count" ||
                            field == "burst" || field == "period";
        CHECK(read == (ratelimit::detail::namesInLua(model, field, "q.") || always));
    }
    if constexpr (std::is_same_v<TestType, ratelimit::TokenBucketModel>) {
        CHECK(script.find("local function imod") == std::string::npos);
        CHECK(script.find("maxRunsPerKey") == std::string::npos);
    }
}

TEMPLATE_TEST_CASE("Redis Lua: refusals still answer at maxmemory", "[redis_lua][redis]",
                   RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    const Quota q = Quota::make<TestType>(Limit::perSecond(2), 1000, 64);
    const std::int64_t lim = q.capacity;
    const std::string key = "{rl-test-lua}:oom:" + std::string(TestType::kName);
    const auto call = [&](std::int64_t now, std::int64_t cost) {
        return rt::command(c.get(),
                           views(evalArgs(scriptOf<TestType>(), key, str(now), cost, true, 0, q)));
    };
    std::string error;
    REQUIRE(parseDecision(call(10'000'000, 2).get(), error));  // empties the key

    REQUIRE(rt::command(c.get(), {"CONFIG", "SET", "maxmemory", "1"}) != nullptr);
    // A plain refusal and a refusal that would rebase (the clock stepped back) both answer.
    const auto refusal = parseDecision(call(10'000'001, 1).get(), error);
    INFO(error);
    REQUIRE(refusal);
    CHECK_FALSE(refusal->allowed);
    const auto rebase = parseDecision(call(9'999'000, 1).get(), error);
    REQUIRE(rebase);
    CHECK_FALSE(rebase->allowed);
    const auto never = parseDecision(call(10'000'001, lim + 1).get(), error);
    REQUIRE(never);
    CHECK(never->retry == -1);
    // An admission that cannot be stored fails instead of admitting for free.
    const rt::RedisReplyPtr admission = call(20'000'000, 1);
    REQUIRE(admission != nullptr);
    CHECK(admission->type == REDIS_REPLY_ERROR);

    REQUIRE(rt::command(c.get(), {"CONFIG", "SET", "maxmemory", "0"}) != nullptr);
    const auto later = parseDecision(call(20'000'000, 1).get(), error);
    REQUIRE(later);
    CHECK(later->allowed);
}

TEST_CASE("Redis Lua: malformed arguments are script errors, not decisions", "[redis_lua][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const rt::RedisContextPtr c = connectTo(*server);
    const Quota q = Quota::make<TokenBucketModel>(Limit::perSecond(2), 1000, 64);
    std::vector<std::string> args =
        evalArgs(scriptOf<TokenBucketModel>(), "{rl-test-lua}:bad", "1000", -1, true, 0, q);
    using ratelimit::detail::callArgument;
    std::string& now = args[kArgvStart + callArgument("now")];
    std::string& cost = args[kArgvStart + callArgument("cost")];
    rt::RedisReplyPtr r = rt::command(c.get(), views(args));
    REQUIRE(r != nullptr);
    CHECK(r->type == REDIS_REPLY_ERROR);
    now = "1.5";
    cost = "1";
    r = rt::command(c.get(), views(args));
    REQUIRE(r != nullptr);
    CHECK(r->type == REDIS_REPLY_ERROR);
    // A cost beyond 2^53 is no error: like any cost above the limit, it never passes.
    now = "1000";
    cost = str(std::numeric_limits<std::int64_t>::max());
    r = rt::command(c.get(), views(args));
    std::string error;
    const auto never = parseDecision(r.get(), error);
    INFO(error);
    REQUIRE(never);
    CHECK_FALSE(never->allowed);
    CHECK(never->retry == -1);
    CHECK(never->remaining == 2);
}

TEST_CASE("RedisServer: restart, pause and TCP mode", "[redis_server][redis]") {
    const auto server = startServer({.tcp = true, .extraArgs = {"--requirepass", "pw"}});
    if (!server) {
        return;
    }
    CHECK(server->port() > 0);
    CHECK(server->unixSocket().empty());
    {
        const rt::RedisContextPtr c = connectTo(*server);
        const rt::RedisReplyPtr noauth = rt::command(c.get(), {"SET", "k", "v"});
        REQUIRE(noauth != nullptr);
        CHECK(noauth->type == REDIS_REPLY_ERROR);
        REQUIRE(rt::command(c.get(), {"AUTH", "pw"}) != nullptr);
        const rt::RedisReplyPtr set = rt::command(c.get(), {"SET", "k", "v"});
        REQUIRE(set != nullptr);
        CHECK(set->type == REDIS_REPLY_STATUS);
    }
    server->pause();
    {
        const rt::RedisContextPtr c{server->connect(std::chrono::milliseconds(100))};
        REQUIRE(c != nullptr);
        // The kernel accepts the connection; the paused server never answers.
        if (c->err == 0) {
            CHECK(rt::command(c.get(), {"PING"}) == nullptr);
        }
    }
    server->resume();
    const int port = server->port();
    server->restart();
    CHECK(server->port() == port);
    {
        const rt::RedisContextPtr c = connectTo(*server);
        REQUIRE(rt::command(c.get(), {"AUTH", "pw"}) != nullptr);
        const rt::RedisReplyPtr get = rt::command(c.get(), {"EXISTS", "k"});
        REQUIRE(get != nullptr);
        CHECK(get->integer == 0);  // persistence is off
    }
    server->kill();
    CHECK_FALSE(server->running());
    server->restart();
    CHECK(server->running());
}
