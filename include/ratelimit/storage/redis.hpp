#pragma once

#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/fork_watch.hpp>
#include <ratelimit/detail/lua.hpp>
#include <ratelimit/detail/redis_connection.hpp>
#include <ratelimit/detail/redis_pipeline.hpp>
#include <ratelimit/detail/sha1.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/storage/storage.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {

/// Counters of a `RedisStorage`, shared by its copies.
struct RedisStats {
    std::uint64_t requests = 0;        ///< scripts sent (EVALSHA, plus the EVAL resends)
    std::uint64_t scriptResends = 0;   ///< EVAL after NOSCRIPT: the only request sent twice
    std::uint64_t connectsOpened = 0;  ///< connections opened (and handshakes done)
    std::uint64_t failures = 0;        ///< calls answered by the failure policy
    std::uint64_t shortCircuited = 0;  ///< of those, answered at once by the open breaker
    /// Writes that carried requests: below `requests` when pipelining gathered several
    /// callers' requests into one write.
    std::uint64_t writes = 0;
};

namespace detail {
struct RedisShared;
}

/// Shared storage in Redis: every check is one `EVALSHA` of the model's Lua, atomic in the
/// server, so any number of hosts share one limit exactly.
///
/// Concurrent calls share a few connections (`Options::pipelining`, the default): the first
/// caller to find a connection idle writes every request queued on it in one write and hands
/// each caller its reply; without pipelining, connections come from a pool (at most
/// `poolSize`, one caller each, no lock held across I/O). Every call has one deadline
/// covering connect, handshake and command; a connection that saw an error or a timeout is
/// closed, never reused. After a failure a circuit breaker answers calls by the limiter's
/// `FailurePolicy` at once, without I/O, and probes the server again after a backoff
/// (doubling up to a maximum). `SIGPIPE` is never raised (writes use MSG_NOSIGNAL) and no
/// signal state is touched. A child process after `fork()` never uses its parent's
/// connections. Construction does no I/O (the address is resolved there).
///
/// Thread safety: thread-safe; copies are handles sharing one pool and breaker.
class RedisStorage {
public:
    /// Options. Fields only ever get added at the end.
    // NOLINTBEGIN(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers): defaults,
    // each documented where it is set.
    struct Options {
        std::string host = "127.0.0.1";  ///< TCP host name or address
        int port = 6379;                 ///< TCP port, 1 … 65535
        std::string unixSocket{};        ///< a unix socket path; used instead of TCP when set
        std::string user{};              ///< ACL user (Redis 6+); empty: `AUTH password`
        std::string password{};          ///< empty: no AUTH
        int database = 0;                ///< `SELECT` index, 0 … 2^31−1
        /// Deadline of one call (connect, handshake and script). Default 50 ms; 1 ms … 1 min.
        std::chrono::milliseconds timeout{50};
        /// Most connections at once; a caller finding all busy waits within its deadline.
        std::size_t poolSize = 16;
        /// First segment of every key. Must not contain `{` or `}`.
        std::string keyPrefix = "rl";
        /// Breaker backoff after the first failure, doubling per failed probe up to the max.
        std::chrono::milliseconds breakerBackoff{100};
        std::chrono::milliseconds breakerMaxBackoff{5000};
        /// Entries of each limiter's memory table for `FailurePolicy::kFallBackToMemory`.
        std::size_t fallbackMaxKeys = 100'000;
        /// Hears health changes (failing, healthy again), from the calling thread, outside
        /// every lock; never once per request. Must not throw.
        std::function<void(const StoreEvent&)> onEvent{};
        /// Concurrent calls share connections (pipelining): a caller queues its request on a
        /// connection; the first caller to find that connection idle writes every queued
        /// request in one write, reads the replies in order and hands each caller its own,
        /// while the others wait within their own deadline. No thread of the library's own.
        /// A request sent at most once, a late reply never given to another caller and a
        /// connection that saw an error closed hold as without it; a timeout or an I/O error
        /// of a shared connection fails every request in flight on it. Default true; false:
        /// one caller per pooled connection at a time.
        bool pipelining = true;
        /// With pipelining: the connections the callers share, 1 … 1024; at most `poolSize`
        /// are used. Default 2: one batch is written while the other's replies are on their
        /// way, and each write still gathers the requests of several callers.
        std::size_t pipelineConnections = 2;
        /// With pipelining: the most requests one write carries, 1 … 65536. Default 64.
        std::size_t maxPipeline = 64;
    };
    // NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)

    using DefaultClock = RedisServerClock;
    static constexpr bool kSharedAcrossHosts = true;
    /// Redis arithmetic counts whole microseconds (the resolution of `TIME`).
    static constexpr std::int64_t kNanosPerTick = 1000;
    /// Operands of the Lua arithmetic stay below 2^53 (exact in Lua's doubles).
    static constexpr std::int64_t kLuaExactBound = std::int64_t{1} << 53;

    template <AlgorithmModel M>
    class Table;

    RedisStorage() : RedisStorage(Options{}) {}
    /// Throws: `std::invalid_argument` naming an option outside its range. Never connects.
    explicit RedisStorage(Options options);

    /// A limiter's namespace in Redis: keys `<prefix>:<name>:<model>:v1{<len>:<key>}`.
    /// Throws: `std::invalid_argument` when the quota's arithmetic reaches 2^53 µs, or the
    /// name holds `{` or `}`.
    template <AlgorithmModel M>
    [[nodiscard]] Table<M> table(const LimiterOptions& options, const Quota& quota) const;

    [[nodiscard]] RedisStats stats() const;

private:
    std::shared_ptr<detail::RedisShared> shared_;
};

namespace detail {

/// Trips on transport failures only: a server that answers (even with an error) is up.
class CircuitBreaker {
public:
    using Clock = std::chrono::steady_clock;

    struct Admission {
        bool proceed = true;
        bool probe = false;                ///< this call probes an open breaker
        std::chrono::nanoseconds wait{0};  ///< when refused: time to the next probe
    };

    CircuitBreaker(std::chrono::nanoseconds base, std::chrono::nanoseconds max)
        : base_(base), max_(max) {}

    Admission admit(Clock::time_point now) {
        if (!open_.load(std::memory_order_acquire)) {
            return {};
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            return {};
        }
        if (!probing_ && now >= nextProbe_) {
            probing_ = true;  // this caller probes; the others keep failing fast
            return {true, true, {}};
        }
        return {false, false, std::max(std::chrono::nanoseconds{1}, nextProbe_ - now)};
    }

    /// The event to report, if the store just became healthy. Only the probe closes an open
    /// breaker: a call sent before it opened may still succeed while the server is down.
    std::optional<StoreEvent> succeeded(bool wasProbe) {
        if (!wasProbe || !open_.load(std::memory_order_acquire)) {
            return std::nullopt;
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            return std::nullopt;
        }
        open_.store(false, std::memory_order_release);
        probing_ = false;
        backoff_ = base_;
        return StoreEvent{StoreEvent::Health::kHealthy, StoreError::kNone,
                          "the store answers again"};
    }

    /// The event to report, if the store just started failing. Only the probe's own failure
    /// lengthens the backoff; calls already in flight when the breaker opened do not.
    std::optional<StoreEvent> failed(const IoStatus& status, Clock::time_point now, bool wasProbe) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            open_.store(true, std::memory_order_release);
            backoff_ = base_;
            nextProbe_ = now + backoff_;
            return StoreEvent{StoreEvent::Health::kFailing, status.error, status.message};
        }
        if (wasProbe && probing_) {
            probing_ = false;
            backoff_ = std::min(backoff_ * 2, max_);
            nextProbe_ = now + backoff_;
        }
        return std::nullopt;
    }

    /// Time until the next probe (the base backoff when closed).
    std::chrono::nanoseconds untilProbe(Clock::time_point now) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            return base_;
        }
        return std::max(std::chrono::nanoseconds{1}, nextProbe_ - now);
    }

private:
    const std::chrono::nanoseconds base_;
    const std::chrono::nanoseconds max_;
    std::atomic<bool> open_{false};
    std::mutex mutex_;
    bool probing_ = false;                     // guarded by mutex_
    Clock::time_point nextProbe_{};            // guarded by mutex_
    std::chrono::nanoseconds backoff_{base_};  // guarded by mutex_
};

struct RedisShared {
    RedisStorage::Options options;
    RedisAddress address;
    CircuitBreaker breaker;

    std::mutex poolMutex;
    std::condition_variable poolFree;
    std::vector<std::unique_ptr<RedisConnection>> idle;  // guarded by poolMutex
    std::size_t open = 0;                                // guarded by poolMutex
    ForkWatch fork;                                      // guarded by poolMutex
    std::unique_ptr<RedisPipeline> pipeline;             // null without pipelining

    std::atomic<std::uint64_t> requests{0};
    std::atomic<std::uint64_t> scriptResends{0};
    std::atomic<std::uint64_t> connectsOpened{0};
    std::atomic<std::uint64_t> failures{0};
    std::atomic<std::uint64_t> shortCircuited{0};
    std::atomic<std::uint64_t> writes{0};

    explicit RedisShared(RedisStorage::Options opts)
        : options(std::move(opts)),
          address(resolveRedisAddress(options.host, options.port, options.unixSocket)),
          breaker(options.breakerBackoff, options.breakerMaxBackoff) {
        if (options.pipelining) {
            pipeline = std::make_unique<RedisPipeline>(
                std::min(options.pipelineConnections, options.poolSize), options.maxPipeline,
                [this](Deadline deadline, IoStatus& status) { return connect(deadline, status); },
                writes);
        }
    }

    /// Sends one request and reads its reply within the deadline, over the pipeline or a
    /// pooled connection of its own. Null with `status` set when no reply came.
    ReplyPtr exchange(std::string_view request, Deadline deadline, IoStatus& status) {
        if (pipeline) {
            return pipeline->exchange(request, deadline, status);
        }
        auto conn = acquire(deadline, status);
        if (!conn) {
            return nullptr;
        }
        writes.fetch_add(1, std::memory_order_relaxed);
        ReplyPtr reply = conn->roundTrip(request, deadline, status);
        // A connection that saw any transport, protocol or auth error is closed, never reused.
        release(std::move(conn), reply != nullptr && !closesConnection(*reply));
        return reply;
    }

    /// A connection for one call: an idle one, or a new one (connected and authenticated
    /// within the deadline) while fewer than `poolSize` are open.
    std::unique_ptr<RedisConnection> acquire(Deadline deadline, IoStatus& status) {
        std::unique_lock<std::mutex> lock(poolMutex);
        if (fork.forked()) {
            // A forked child: the parent's connections are never used here (closing our copy
            // of a descriptor sends nothing), and those busy at the fork never come back.
            idle.clear();
            open = 0;
        }
        for (;;) {
            while (!idle.empty()) {
                auto c = std::move(idle.back());
                idle.pop_back();
                if (!c->stale(std::chrono::steady_clock::now())) {
                    return c;
                }
                --open;  // closed by the server while idle (a restart): dropped unused
            }
            if (open < options.poolSize) {
                ++open;
                lock.unlock();
                auto c = connect(deadline, status);
                if (!c) {
                    lock.lock();
                    --open;
                    poolFree.notify_one();
                }
                return c;
            }
            if (poolFree.wait_until(lock, deadline) == std::cv_status::timeout) {
                status = {StoreError::kTimeout, "all " + std::to_string(options.poolSize) +
                                                    " connections stayed busy until the deadline"};
                return nullptr;
            }
        }
    }

    /// Returns a connection; one that saw any error is closed instead.
    void release(std::unique_ptr<RedisConnection> c, bool reusable) {
        std::unique_lock<std::mutex> lock(poolMutex);
        if (c->owner() != fork.pid()) {
            return;  // opened before a fork: dropped without use
        }
        if (reusable) {
            c->idleFrom(std::chrono::steady_clock::now());
            idle.push_back(std::move(c));
        } else {
            --open;
            lock.unlock();
            c.reset();
            lock.lock();
        }
        poolFree.notify_one();
    }

    std::unique_ptr<RedisConnection> connect(Deadline deadline, IoStatus& status) {
        auto c = RedisConnection::open(address, deadline, status);
        if (!c) {
            return nullptr;
        }
        connectsOpened.fetch_add(1, std::memory_order_relaxed);
        std::string request;
        if (!options.password.empty()) {
            if (options.user.empty()) {
                appendCommand(request, {"AUTH", options.password});
            } else {
                appendCommand(request, {"AUTH", options.user, options.password});
            }
            if (!handshake(*c, request, deadline, status)) {
                return nullptr;
            }
        }
        if (options.database != 0) {
            request.clear();
            appendCommand(request, {"SELECT", std::to_string(options.database)});
            if (!handshake(*c, request, deadline, status)) {
                return nullptr;
            }
        }
        return c;
    }

    static bool handshake(RedisConnection& c, const std::string& request, Deadline deadline,
                          IoStatus& status) {
        const ReplyPtr reply = c.roundTrip(request, deadline, status);
        if (!reply) {
            if (status.error == StoreError::kOutcomeUnknown) {
                status.error = StoreError::kTimeout;  // a handshake changes no data
            }
            return false;
        }
        if (reply->type == REDIS_REPLY_ERROR) {
            status = {StoreError::kAuth, std::string(reply->str, reply->len)};
            return false;
        }
        return true;
    }

    void report(const std::optional<StoreEvent>& event) const {
        if (event && options.onEvent) {
            options.onEvent(*event);
        }
    }
};

inline std::string decimal(std::int64_t v) {
    constexpr std::size_t kDigits = 24;  // a sign and 19 digits fit
    std::array<char, kDigits> buffer{};
    const char* const end = std::to_chars(buffer.data(), buffer.data() + buffer.size(), v).ptr;
    return {buffer.data(), static_cast<std::size_t>(end - buffer.data())};
}

/// Redis bounds: every operand of the Lua arithmetic below 2^53.
template <AlgorithmModel M>
void checkRedisRange(const Quota& q) {
    const Int128 bound = RedisStorage::kLuaExactBound;
    const ModelRange r = M::range(q);
    const Int128 countSpan = Int128{q.count} * q.period;
    const auto fail = [&](const std::string& what, Int128 value, const std::string& largest) {
        throwInvalidArgument(
            std::string(M::kName) + " with Limit{count=" + std::to_string(q.count) +
            ", period=" + std::to_string(q.period) + "us, burst=" + std::to_string(q.burst) +
            "} is not representable in Redis: " + what + " = " +
            std::to_string(clampToInt64(value)) + " reaches 2^53 (exact integers in Lua); " +
            largest);
    };
    if (r.units >= bound) {
        fail("burst·period/gcd(count, period) in µs units", r.units,
             "the largest accepted burst here is " +
                 std::to_string(clampToInt64((bound - 1) / q.unitsPerToken)));
    }
    if (countSpan >= bound) {
        fail("count·period in µs", countSpan,
             "the largest accepted count here is " +
                 std::to_string(clampToInt64((bound - 1) / q.period)));
    }
    if (r.span >= bound / 4) {
        fail("the longest span in µs", r.span, "spans must stay below 2^51 µs (71 years)");
    }
}

}  // namespace detail

/// One limiter's view of a `RedisStorage`: its key prefix, its script, its failure policy.
/// Thread safety: thread-safe; copies share the storage.
template <AlgorithmModel M>
class RedisStorage::Table {
public:
    Table(std::shared_ptr<detail::RedisShared> shared, const LimiterOptions& options,
          const Quota& quota)
        : shared_(std::move(shared)),
          keyPrefix_(shared_->options.keyPrefix + ":" + options.name + ":" + std::string(M::kName) +
                     ":v1"),
          script_(detail::composeScript(M::kLua, M::kName)),
          sha_(detail::sha1Hex(script_)),
          quota_(quota),
          policy_(options.failurePolicy),
          fallback_(std::make_shared<Fallback>(shared_->options.fallbackMaxKeys, options, quota)) {
        const std::int64_t limit = M::kBucket ? quota.burst : quota.count;
        for (const std::int64_t v :
             {quota.count, quota.burst, quota.period, quota.unitsPerToken, quota.unitsPerTick,
              quota.capacityUnits, quota.maxRunsPerKey, limit, quota.lateTolerance}) {
            params_.push_back(detail::decimal(v));
        }
    }

    /// One check at the time `now` gives (µs ticks of the limiter's clock), read just before
    /// the request is sent.
    [[nodiscard]] Decision step(std::string_view key, detail::TickSource now, std::int64_t cost,
                                bool consume) const {
        const Tick tick = now();
        return call(key, detail::decimal(tick), 0, cost, consume, tick);
    }

    /// One check at the server's `TIME`, minus the key's window phase (µs).
    [[nodiscard]] Decision stepAtStoreTime(std::string_view key, Tick phase, std::int64_t cost,
                                           bool consume) const {
        const Tick local = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
        return call(key, std::string(), phase, cost, consume, detail::satSub(local, phase));
    }

    /// Deletes the key's state in Redis (and in the fallback table).
    void reset(std::string_view key) const {
        fallback_->table.reset(key);
        std::string request;
        detail::appendCommand(request, {"DEL", redisKey(key)});
        const auto start = std::chrono::steady_clock::now();
        if (!shared_->breaker.admit(start).proceed) {
            return;  // no I/O during an outage; the key expires on its own
        }
        detail::IoStatus status;
        shared_->exchange(request, start + shared_->options.timeout, status);
    }

    /// The Redis key holding `key`'s state: the length prefix keeps the encoding injective and
    /// the hash tag non-empty (the empty key included), so one check stays in one Cluster slot.
    [[nodiscard]] std::string redisKey(std::string_view key) const {
        std::string k;
        k.reserve(keyPrefix_.size() + key.size() + 24);
        k.append(keyPrefix_)
            .append("{")
            .append(detail::decimal(static_cast<std::int64_t>(key.size())));
        k.append(":").append(key).append("}");
        return k;
    }

    [[nodiscard]] const std::string& script() const noexcept { return script_; }
    [[nodiscard]] const std::string& scriptSha() const noexcept { return sha_; }

private:
    struct Fallback {
        Fallback(std::size_t maxKeys, const LimiterOptions& options, const Quota& quota)
            : table(MemoryStorage(MemoryStorage::Options{.maxKeys = maxKeys})
                        .template table<M>(options, quota)) {}
        MemoryStorage::Table<M> table;
    };

    [[nodiscard]] Decision call(std::string_view key, const std::string& now, Tick phase,
                                std::int64_t cost, bool consume, Tick fallbackNow) const {
        const auto start = std::chrono::steady_clock::now();
        const auto admission = shared_->breaker.admit(start);
        if (!admission.proceed) {
            shared_->shortCircuited.fetch_add(1, std::memory_order_relaxed);
            return degrade({StoreError::kCircuitOpen, "the circuit breaker is open"}, key, cost,
                           consume, fallbackNow, admission.wait);
        }
        const auto deadline = start + shared_->options.timeout;
        detail::IoStatus status;
        std::optional<Decision> answer = run(key, now, phase, cost, consume, deadline, status);
        if (answer) {
            shared_->report(shared_->breaker.succeeded(admission.probe));
            return *answer;
        }
        if (detail::tripsBreaker(status.error)) {
            shared_->report(
                shared_->breaker.failed(status, std::chrono::steady_clock::now(), admission.probe));
        } else {
            // It answered: the link is fine.
            shared_->report(shared_->breaker.succeeded(admission.probe));
        }
        return degrade(status, key, cost, consume, fallbackNow,
                       shared_->breaker.untilProbe(std::chrono::steady_clock::now()));
    }

    std::optional<Decision> run(std::string_view key, const std::string& now, Tick phase,
                                std::int64_t cost, bool consume, detail::Deadline deadline,
                                detail::IoStatus& status) const {
        const std::string redisKeyName = redisKey(key);
        detail::ReplyPtr reply =
            send(sha_, "EVALSHA", redisKeyName, now, phase, cost, consume, deadline, status);
        if (reply && isNoScript(*reply)) {
            // The script did not run (restart, failover, SCRIPT FLUSH): the one resend allowed.
            shared_->scriptResends.fetch_add(1, std::memory_order_relaxed);
            reply =
                send(script_, "EVAL", redisKeyName, now, phase, cost, consume, deadline, status);
        }
        if (!reply) {
            return std::nullopt;
        }
        return parse(*reply, status);
    }

    detail::ReplyPtr send(const std::string& scriptOrSha, std::string_view verb,
                          const std::string& redisKeyName, const std::string& now, Tick phase,
                          std::int64_t cost, bool consume, detail::Deadline deadline,
                          detail::IoStatus& status) const {
        std::string request;
        constexpr std::size_t kOverhead = 160;  // the other arguments and the RESP framing
        request.reserve(redisKeyName.size() + scriptOrSha.size() + kOverhead);
        // NOLINTBEGIN(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers): the
        // quota's ARGV[5..13] in detail::kLuaMain's order.
        detail::appendCommand(
            request,
            {verb, scriptOrSha, "1", redisKeyName, now, detail::decimal(cost), consume ? "1" : "0",
             detail::decimal(phase), params_[0], params_[1], params_[2], params_[3], params_[4],
             params_[5], params_[6], params_[7], params_[8]});
        // NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)
        shared_->requests.fetch_add(1, std::memory_order_relaxed);
        return shared_->exchange(request, deadline, status);
    }

    static bool isNoScript(const redisReply& reply) {
        return reply.type == REDIS_REPLY_ERROR &&
               std::string_view(reply.str, reply.len).substr(0, 8) == "NOSCRIPT";
    }

    std::optional<Decision> parse(const redisReply& reply, detail::IoStatus& status) const {
        if (reply.type == REDIS_REPLY_ERROR) {
            const std::string_view text(reply.str, reply.len);
            status = {detail::classifyErrorReply(text), std::string(text)};
            return std::nullopt;
        }
        constexpr std::size_t kFields = 5;  // allowed, limit, remaining, retry, reset
        if (reply.type != REDIS_REPLY_ARRAY || reply.elements != kFields) {
            status = {StoreError::kProtocol, "unexpected script reply"};
            return std::nullopt;
        }
        std::array<std::int64_t, kFields> v{};
        for (std::size_t i = 0; i < kFields; ++i) {
            if (reply.element[i]->type != REDIS_REPLY_INTEGER) {
                status = {StoreError::kProtocol, "unexpected script reply element"};
                return std::nullopt;
            }
            v[i] = reply.element[i]->integer;
        }
        return detail::decision(quota_, v[0] != 0, v[1], v[2],
                                v[3] < 0 ? detail::kNeverTicks : v[3], v[4]);
    }

    /// The declared failure policy's answer; every one is marked degraded.
    [[nodiscard]] Decision degrade(const detail::IoStatus& status, std::string_view key,
                                   std::int64_t cost, bool consume, Tick now,
                                   std::chrono::nanoseconds untilProbe) const {
        shared_->failures.fetch_add(1, std::memory_order_relaxed);
        const std::int64_t limit = M::kBucket ? quota_.burst : quota_.count;
        const auto fixed = [now] { return now; };
        Decision d;
        switch (policy_) {
            case FailurePolicy::kThrow:
                throw StoreException(status.error, status.message);
            case FailurePolicy::kFallBackToMemory:
                d = fallback_->table.step(key, detail::TickSource(fixed), cost, consume);
                break;
            case FailurePolicy::kFailOpen:
                d.allowed = cost <= limit;
                d.limit = limit;
                d.remaining = cost <= limit ? limit - cost : limit;
                d.retryAfter = cost <= limit ? std::chrono::nanoseconds{0} : Decision::kNever;
                break;
            case FailurePolicy::kFailClosed:
                d.allowed = false;
                d.limit = limit;
                d.remaining = 0;
                d.retryAfter = cost <= limit ? untilProbe : Decision::kNever;
                break;
        }
        d.degraded = true;
        return d;
    }

    std::shared_ptr<detail::RedisShared> shared_;
    std::string keyPrefix_;
    std::string script_;
    std::string sha_;
    Quota quota_;
    FailurePolicy policy_;
    std::vector<std::string> params_;
    std::shared_ptr<Fallback> fallback_;
};

inline RedisStorage::RedisStorage(Options options) {
    const auto bad = [](const std::string& what) {
        detail::throwInvalidArgument("RedisStorage::Options." + what);
    };
    constexpr int kMaxPort = 65535;
    if (options.unixSocket.empty() && (options.port < 1 || options.port > kMaxPort)) {
        bad("port must be in 1..65535 (got " + std::to_string(options.port) + ")");
    }
    if (options.unixSocket.empty() && options.host.empty()) {
        bad("host must not be empty without a unixSocket");
    }
    if (options.database < 0) {
        bad("database must be >= 0 (got " + std::to_string(options.database) + ")");
    }
    if (options.timeout < std::chrono::milliseconds{1} ||
        options.timeout > std::chrono::minutes{1}) {
        bad("timeout must be in 1ms..1min (got " + std::to_string(options.timeout.count()) + "ms)");
    }
    if (options.poolSize < 1 || options.poolSize > 1024) {
        bad("poolSize must be in 1..1024 (got " + std::to_string(options.poolSize) + ")");
    }
    if (options.keyPrefix.find_first_of("{}") != std::string::npos) {
        bad("keyPrefix must not contain '{' or '}' (got \"" + options.keyPrefix + "\")");
    }
    if (options.breakerBackoff < std::chrono::milliseconds{1} ||
        options.breakerMaxBackoff < options.breakerBackoff) {
        bad("breakerBackoff must be >= 1ms and <= breakerMaxBackoff");
    }
    if (options.fallbackMaxKeys < 1) {
        bad("fallbackMaxKeys must be >= 1");
    }
    if (options.pipelineConnections < 1 || options.pipelineConnections > 1024) {
        bad("pipelineConnections must be in 1..1024 (got " +
            std::to_string(options.pipelineConnections) + ")");
    }
    if (options.maxPipeline < 1 || options.maxPipeline > 65536) {
        bad("maxPipeline must be in 1..65536 (got " + std::to_string(options.maxPipeline) + ")");
    }
    shared_ = std::make_shared<detail::RedisShared>(std::move(options));
}

template <AlgorithmModel M>
RedisStorage::Table<M> RedisStorage::table(const LimiterOptions& options,
                                           const Quota& quota) const {
    if (options.name.find_first_of("{}") != std::string::npos) {
        detail::throwInvalidArgument(
            "LimiterOptions.name must not contain '{' or '}' with Redis (got \"" + options.name +
            "\")");
    }
    detail::checkRedisRange<M>(quota);
    return Table<M>(shared_, options, quota);
}

inline RedisStats RedisStorage::stats() const {
    RedisStats s;
    s.requests = shared_->requests.load(std::memory_order_relaxed);
    s.scriptResends = shared_->scriptResends.load(std::memory_order_relaxed);
    s.connectsOpened = shared_->connectsOpened.load(std::memory_order_relaxed);
    s.failures = shared_->failures.load(std::memory_order_relaxed);
    s.shortCircuited = shared_->shortCircuited.load(std::memory_order_relaxed);
    s.writes = shared_->writes.load(std::memory_order_relaxed);
    return s;
}

}  // namespace v1
}  // namespace ratelimit
