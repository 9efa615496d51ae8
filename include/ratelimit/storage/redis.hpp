#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/penalty.hpp>
#include <ratelimit/algorithms/tiered.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/circuit_breaker.hpp>
#include <ratelimit/detail/fork_watch.hpp>
#include <ratelimit/detail/lease_call.hpp>
#include <ratelimit/detail/limit_epochs.hpp>
#include <ratelimit/detail/per_process.hpp>
#include <ratelimit/detail/redis_cluster.hpp>
#include <ratelimit/detail/redis_connection.hpp>
#include <ratelimit/detail/redis_pool.hpp>
#include <ratelimit/detail/redis_script.hpp>
#include <ratelimit/detail/ref_counted.hpp>
#include <ratelimit/detail/sha1.hpp>
#include <ratelimit/detail/siphash.hpp>
#include <ratelimit/detail/store_listeners.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/redis_options.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/storage/storage.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {

/// What the Redis storage needs from a model beyond `AlgorithmModel`: its step as Lua, the hash
/// fields its state is stored in, and the version of that encoding (the library's models take
/// both from `ModelNames`). The Lua is an array of pieces the storage joins in order, so that
/// models share pieces without a constant joined at compile time (the constant evaluator
/// copies a character at a time, in every file that includes a model).
template <class M>
concept RedisScriptedModel = AlgorithmModel<M> && requires {
    std::span<const std::string_view>(M::kLua);
    { M::kStateVersion } -> std::convertible_to<int>;
    std::span<const std::string_view>(M::kStateFields);
};

namespace detail {

/// A penalty around a model whose Lua encodes its state itself (the sliding log): its Lua
/// reads a state of fields, so it runs in memory only.
template <class M>
inline constexpr bool kPenaltyOverEncoded = false;
template <class Inner>
inline constexpr bool kPenaltyOverEncoded<PenalizedModel<Inner>> = requires {
    Inner::kLuaEncodesState;
};

template <class M>
inline constexpr bool kScriptedSet = false;
template <class... Ms>
inline constexpr bool kScriptedSet<LimitSetModel<Ms...>> = (RedisScriptedModel<Ms> && ...);

}  // namespace detail

namespace detail {

/// A model whose script the Redis storage composes: one with its Lua, or a limit set of such
/// models, run as one script over one key per member.
template <class M>
concept ScriptedModel =
    (RedisScriptedModel<M> && !detail::kPenaltyOverEncoded<M>) || detail::kScriptedSet<M>;

template <class M>
inline constexpr bool kScriptedTiers = false;
template <class Inner>
inline constexpr bool kScriptedTiers<TieredModel<Inner>> = ScriptedModel<Inner>;

/// The model a call runs in Redis: a tiered model's inner model (each call sends its tier's
/// quota, and the script carries a key written under another tier over), any other model
/// itself.
template <class M>
struct ScriptedSelect {
    using Type = M;
};
template <class Inner>
struct ScriptedSelect<TieredModel<Inner>> {
    using Type = Inner;
};
template <class M>
using ScriptedOf = typename ScriptedSelect<M>::Type;

/// The quota a call runs under: its tier's, for a tiered model.
template <class M>
const QuotaOf<ScriptedOf<M>>& callQuota(const QuotaOf<M>& q, const EachOf<M>* each) noexcept {
    if constexpr (kIsTiered<M>) {
        return q.tiers[each != nullptr ? each->tier : 0];
    } else {
        (void)each;
        return q;
    }
}

/// Where a call's members' decisions go: a tiered model's inner ones.
template <class M>
EachOf<ScriptedOf<M>>* callEach(EachOf<M>* each) noexcept {
    if constexpr (kIsTiered<M>) {
        return each != nullptr ? &each->each : nullptr;
    } else {
        return each;
    }
}

}  // namespace detail

/// A model the Redis storage runs: one with its Lua (`RedisScriptedModel`), a limit set of
/// such models, run as one script over one key per member, or tiers of either.
template <class M>
concept RedisModel = detail::ScriptedModel<M> || detail::kScriptedTiers<M>;

namespace detail {

/// What `composeScript` takes from `M`. A model whose Lua encodes its state itself says so
/// with `static constexpr bool kLuaEncodesState = true`.
template <RedisScriptedModel M>
constexpr ScriptModel scriptModel() noexcept {
    bool encodes = false;
    if constexpr (requires { M::kLuaEncodesState; }) {
        encodes = M::kLuaEncodesState;
    }
    return {M::kName, M::kLua, M::kStateFields, encodes, M::kBucket};
}

struct RedisShared;

/// Lua numbers are doubles: values below 2^53, spans below 2^51 µs (so that a window and the
/// sums of times and spans a step forms stay below 2^53), and count·period below 2^53 (the
/// window algorithms' products, which C++ forms in 128 bits).
inline constexpr StorageRange kRedisRange{"Redis", "us", " (exact integers in Lua)", 53, 51, 53};

}  // namespace detail

/// Shared storage in Redis: every check is one run of the model's Lua, atomic in the server,
/// so any number of hosts share one limit exactly: an `FCALL` of it as a function (Redis 7+,
/// `Options::functions`), or an `EVALSHA`.
///
/// Concurrent calls share a few connections (`Options::pipelining`, the default): the first
/// caller to find a connection idle writes every request queued on it in one write and hands
/// each caller its reply; without pipelining, connections come from a pool (at most
/// `poolSize`, one caller each, no lock held across I/O). Every call has one deadline
/// covering connect, handshake and command; a connection that saw an error or a timeout is
/// closed, never reused. After a failure a circuit breaker answers calls by the limiter's
/// `FailurePolicy` at once, without I/O, and probes the server again after a backoff
/// (doubling up to a maximum). `SIGPIPE` is never raised (writes use MSG_NOSIGNAL) and no
/// signal state is touched. A child process after `fork()` never touches its parent's
/// connections, locks or breaker: its first call makes its own. Construction does no I/O: the
/// host is looked up when a call first connects (`RedisStorageOptions::resolve`).
///
/// Thread safety: thread-safe; copies are handles sharing one pool and breaker.
class RedisStorage
    : public detail::StorageHandle<detail::RedisShared, RedisStorageOptions, RedisStats> {
public:
    using DefaultClock = RedisServerClock;
    static constexpr bool kSharedAcrossHosts = true;
    /// Redis arithmetic counts whole microseconds (the resolution of `TIME`).
    static constexpr std::int64_t kNanosPerTick = 1000;
    /// Operands of the Lua arithmetic stay below 2^53 (exact in Lua's doubles).
    static constexpr std::int64_t kLuaExactBound = std::int64_t{1} << 53;

    template <RedisModel M>
    class Table;

    /// Throws: `std::invalid_argument` naming an option outside its range. Never connects.
    using StorageHandle::StorageHandle;

    /// Keys: `<prefix>:<name>:<model>:v<N>{<len>:<key>}`.
    /// Throws: `std::invalid_argument` when the quota's arithmetic reaches 2^53 µs, or the
    /// name holds `{` or `}`.
    template <RedisModel M>
    [[nodiscard]] Table<M> table(const LimiterOptions& options, const QuotaOf<M>& quota) const {
        if (options.name.find_first_of("{}") != std::string::npos) {
            detail::throwInvalidArgument(
                "LimiterOptions.name must not contain '{' or '}' with Redis (got \"{}\")",
                {options.name});
        }
        detail::checkRange<M>(quota, detail::kRedisRange);
        return Table<M>(shared(), options, quota);
    }
};

namespace detail {

/// The quota a script reads, in ARGV order after the call's own arguments: one list gives
/// the script its names (`QUOTA`) and the request its values, so the two cannot disagree.
struct QuotaArgument {
    std::string_view name;
    std::int64_t Quota::*field;
};
inline constexpr std::array<QuotaArgument, 9> kQuotaArguments{{
    {"count", &Quota::count},
    {"burst", &Quota::burst},
    {"capacity", &Quota::capacity},
    {"period", &Quota::period},
    {"unitsPerToken", &Quota::unitsPerToken},
    {"unitsPerTick", &Quota::unitsPerTick},
    {"capacityUnits", &Quota::capacityUnits},
    {"maxRunsPerKey", &Quota::maxRunsPerKey},
    {"lateTolerance", &Quota::lateTolerance},
}};
inline constexpr std::array<std::string_view, kQuotaArguments.size()> kQuotaArgumentNames = [] {
    std::array<std::string_view, kQuotaArguments.size()> names{};
    for (std::size_t i = 0; i < names.size(); ++i) {
        names[i] = kQuotaArguments[i].name;
    }
    return names;
}();

/// A penalized model's quota arguments, after the others (`PenalizedModel`).
struct PenaltyArgument {
    std::string_view name;
    std::int64_t PenaltyTicks::*field;
};
inline constexpr std::array<PenaltyArgument, 3> kPenaltyArguments{{
    {"strikes", &PenaltyTicks::strikes},
    {"strikeWindow", &PenaltyTicks::strikeWindow},
    {"blockTicks", &PenaltyTicks::blockTicks},
}};
inline constexpr auto kPenalizedArgumentNames = [] {
    std::array<std::string_view, kQuotaArguments.size() + kPenaltyArguments.size()> names{};
    std::size_t at = 0;
    for (const QuotaArgument& a : kQuotaArguments) {
        names[at++] = a.name;
    }
    for (const PenaltyArgument& a : kPenaltyArguments) {
        names[at++] = a.name;
    }
    return names;
}();

/// The quota's arguments, in decimal, appended to `values`.
inline void appendQuotaArguments(std::vector<std::string>& values, const Quota& q) {
    for (const QuotaArgument& a : kQuotaArguments) {
        values.push_back(decimal(q.*a.field));
    }
}

/// A model's script and the quota arguments its calls send: a limit set's holds each
/// member's model once and reads each member's quota in turn (`composeSetScript`); tiers run
/// their model's script, each call with its tier's quota.
template <RedisModel M>
std::string scriptOf(ScriptForm form = ScriptForm::kEval) {
    if constexpr (kIsTiered<M>) {
        return scriptOf<typename M::Inner>(form);
    } else if constexpr (kIsLimitSet<M>) {
        std::array<ScriptModel, M::kSize> members{};
        M::forEach(
            [&]<std::size_t I>() { members[I] = scriptModel<typename M::template Member<I>>(); });
        return composeSetScript(members, kQuotaArgumentNames, form);
    } else if constexpr (kIsPenalized<M>) {
        return composeScript(scriptModel<M>(), kPenalizedArgumentNames, kLuaMain, form);
    } else {
        return composeScript(scriptModel<M>(), kQuotaArgumentNames, kLuaMain, form);
    }
}

/// One script as a table sends it: the chunk `EVALSHA` names by its SHA-1 (and `EVAL`
/// sends), and the function library whose function `FCALL` names.
struct ScriptForms {
    std::string text;
    std::string sha;
    std::string library;
    std::string function;

    /// The forms `compose(form)` writes.
    template <class Compose>
    static ScriptForms of(Compose compose) {
        ScriptForms forms;
        forms.text = compose(ScriptForm::kEval);
        forms.sha = sha1Hex(forms.text);
        forms.library = compose(ScriptForm::kLibrary);
        forms.function = libraryName(forms.library);
        return forms;
    }
};

/// Script forms composed by the first call that needs them, once, for every copy of a table:
/// a bucket's lease script, which a table never leased from never composes (composing and
/// hashing both forms costs about as much as the table's own script).
/// Thread safety: thread-safe.
class LazyScriptForms final : public RefCounted {
public:
    explicit LazyScriptForms(ScriptForms (*compose)()) noexcept : compose_(compose) {}

    [[nodiscard]] const ScriptForms& get() const {
        std::call_once(once_, [this] { forms_ = compose_(); });
        return forms_;
    }

private:
    ScriptForms (*compose_)();
    mutable std::once_flag once_;
    mutable ScriptForms forms_;  // written once, under once_
};

/// A quota's identity (`kQuotaIdentityArgument`): its arguments, joined by colons (no comma,
/// which would split the command's name in `redis-benchmark --csv`).
inline std::string quotaIdentity(std::span<const std::string> arguments) {
    std::string identity;
    for (const std::string& a : arguments) {
        identity.append(identity.empty() ? "" : ":").append(a);
    }
    return identity;
}

/// The arguments that send `q`, after its identity (each tier's, for a tiered model).
template <RedisModel M>
std::vector<std::string> quotaArguments(const QuotaOf<M>& q) {
    std::vector<std::string> values;
    if constexpr (kIsTiered<M>) {
        // Every tier's, in tier order; a call sends its tier's (`Table::callArguments`).
        for (const auto& tier : q.tiers) {
            std::vector<std::string> own = quotaArguments<typename M::Inner>(tier);
            values.insert(values.end(), own.begin(), own.end());
        }
    } else if constexpr (kIsLimitSet<M>) {
        for (const Quota& member : q.members) {
            appendQuotaArguments(values, member);
        }
        // The members in dry-run, a `0` or `1` each (`setMain`).
        std::string dryRun(M::kSize, '0');
        for (std::size_t i = 0; i < M::kSize; ++i) {
            dryRun[i] = ((q.dryRunMembers >> i) & 1U) != 0 ? '1' : '0';
        }
        values.push_back(std::move(dryRun));
    } else {
        appendQuotaArguments(values, q);
        if constexpr (kIsPenalized<M>) {
            for (const PenaltyArgument& a : kPenaltyArguments) {
                values.push_back(decimal(q.*a.field));
            }
        }
    }
    if constexpr (!kIsTiered<M>) {
        // The identity first, then the values; built anew rather than inserted at the front,
        // which g++ 12 at -O3 flags as a potential null dereference.
        std::vector<std::string> sent;
        sent.reserve(values.size() + 1);
        sent.push_back(quotaIdentity(values));
        sent.insert(sent.end(), std::make_move_iterator(values.begin()),
                    std::make_move_iterator(values.end()));
        return sent;
    }
    return values;
}

/// What one process uses to reach Redis: the server's connections and circuit breaker, or a
/// Cluster's nodes and slot map; one per process (`PerProcess`): a forked child leaves its
/// parent's link as the fork found it, since a parent's thread may have held its locks, or
/// queued requests on it, at the fork. Its sockets stay open, unused, in the child until it
/// exits or execs (they are close-on-exec): closing them could close a file the child opened
/// under a reused descriptor number.
struct RedisLink {
    /// `options` and the counters are the storage's, which outlives its links.
    RedisLink(const RedisStorageOptions& options, RedisPoolCounters& counters,
              std::atomic<std::uint64_t>& mapReads)
        : server(options.cluster.empty() ? std::make_unique<RedisNode>(options, counters)
                                         : nullptr),
          cluster(options.cluster.empty()
                      ? nullptr
                      : std::make_unique<RedisCluster>(options, counters, mapReads)) {}

    /// True in a child of the process that made this link.
    [[nodiscard]] bool forked() const noexcept { return fork.forked(); }

    /// Where a call goes whose Redis keys share `redisKey`'s slot: the server, or the master
    /// serving that slot.
    // NOLINTNEXTLINE(readability-make-member-function-const): changes the map it points to
    RedisRoute route(std::string_view redisKey, Deadline deadline) {
        if (!cluster) {
            return {server.get(), false};
        }
        return {&cluster->owner(clusterSlot(redisKey), deadline), false};
    }

    /// Where the `MOVED` or `ASK` reply `text` of `asked` sends the call; nullopt with one
    /// server, which never redirects, or when `text` is no redirect.
    // NOLINTNEXTLINE(readability-make-member-function-const): changes the map it points to
    std::optional<RedisRoute> redirect(std::string_view text, const RedisNode& asked) {
        return cluster ? cluster->redirect(text, asked) : std::nullopt;
    }

    /// After a call was answered: in a Cluster, the slot map is read again when a `MOVED` said
    /// it changed and a read is due.
    // NOLINTNEXTLINE(readability-make-member-function-const): changes the map it points to
    void afterCall(Deadline deadline) {
        if (cluster) {
            cluster->afterCall(deadline);
        }
    }

    /// After `node` failed or its breaker answered a call: in a Cluster, the slot map is read
    /// again when due, so that a promoted replica takes its slots.
    // NOLINTNEXTLINE(readability-make-member-function-const): changes the map it points to
    void nodeFailed(Deadline deadline) {
        if (cluster) {
            cluster->nodeFailed(deadline);
        }
    }

    /// `event` of `node`'s breaker; in a Cluster, each node's health is heard on its own and
    /// the message names it.
    [[nodiscard]] std::optional<StoreEvent> about(const RedisNode& node,
                                                  std::optional<StoreEvent> event) const {
        if (event && cluster) {
            event->message = node.endpoint.name() + ": " + event->message;
        }
        return event;
    }

    ForkWatch fork;
    std::unique_ptr<RedisNode> server;      // null in a Cluster
    std::unique_ptr<RedisCluster> cluster;  // null with one server
};

/// This process's `RedisLink`.
/// Thread safety: thread-safe.
class RedisLinks {
public:
    /// `options` and the counters are the storage's, which outlives its links.
    RedisLinks(const RedisStorageOptions& options, RedisPoolCounters& counters,
               std::atomic<std::uint64_t>& mapReads)
        : options_(options), counters_(counters), mapReads_(mapReads), links_(make()) {}

    /// This process's link. The first call in a forked child makes the child's own, so the
    /// call's one deadline still covers it.
    RedisLink& current() {
        return links_.current([this] { return make(); });
    }

private:
    [[nodiscard]] std::unique_ptr<RedisLink> make() const {
        return std::make_unique<RedisLink>(options_, counters_, mapReads_);
    }

    const RedisStorageOptions& options_;
    RedisPoolCounters& counters_;
    std::atomic<std::uint64_t>& mapReads_;
    PerProcess<RedisLink> links_;
};

/// What every copy of one `RedisStorage` handle shares: options, this process's link and the
/// counters.
struct RedisShared final : RefCounted {
    RedisStorageOptions options;
    RedisPoolCounters poolCounters;
    std::atomic<std::uint64_t> slotMapReads{0};
    RedisLinks links{options, poolCounters, slotMapReads};
    std::atomic<std::uint64_t> requests{0};
    std::atomic<std::uint64_t> movedFollowed{0};
    std::atomic<std::uint64_t> askFollowed{0};
    std::atomic<std::uint64_t> tryAgainRetries{0};
    std::atomic<std::uint64_t> scriptResends{0};
    std::atomic<std::uint64_t> functionLoads{0};
    /// `options.functions`, until a server shows it has none for us.
    std::atomic<bool> functions{options.functions};
    std::atomic<std::uint64_t> failures{0};
    std::atomic<std::uint64_t> shortCircuited{0};
    std::array<std::atomic<std::uint64_t>, kStoreErrorKinds> failuresByKind{};
    StoreListeners listeners;

    explicit RedisShared(RedisStorageOptions opts) : options(checked(std::move(opts))) {}

    [[nodiscard]] RedisStats stats() const {
        RedisStats s;
        s.requests = requests.load(std::memory_order_relaxed);
        s.scriptResends = scriptResends.load(std::memory_order_relaxed);
        s.connectsOpened = poolCounters.connectsOpened.load(std::memory_order_relaxed);
        s.failures = failures.load(std::memory_order_relaxed);
        s.shortCircuited = shortCircuited.load(std::memory_order_relaxed);
        s.writes = poolCounters.writes.load(std::memory_order_relaxed);
        for (std::size_t kind = 0; kind < kStoreErrorKinds; ++kind) {
            s.failuresByKind[kind] = failuresByKind[kind].load(std::memory_order_relaxed);
        }
        s.movedFollowed = movedFollowed.load(std::memory_order_relaxed);
        s.askFollowed = askFollowed.load(std::memory_order_relaxed);
        s.tryAgainRetries = tryAgainRetries.load(std::memory_order_relaxed);
        s.slotMapReads = slotMapReads.load(std::memory_order_relaxed);
        s.functionLoads = functionLoads.load(std::memory_order_relaxed);
        return s;
    }

    /// The deadline of a call that starts now.
    [[nodiscard]] Deadline deadline() const {
        return std::chrono::steady_clock::now() + options.timeout;
    }

    /// Tells the hook and the listeners of a change of health, if there is one.
    void report(const std::optional<StoreEvent>& event) {
        if (!event) {
            return;
        }
        if (options.onEvent) {
            options.onEvent(*event);
        }
        listeners.tellEach([&](DecisionListener& l) { l.onStoreEvent(*event); });
    }

    /// `options`, once each is in its range. Throws: `std::invalid_argument` naming one that is
    /// not.
    static RedisStorageOptions checked(RedisStorageOptions options) {
        // "RedisStorage::Options.<field> ... (got <value><unit>)".
        const auto bad = [](std::string_view field, std::string_view rule, auto value,
                            std::string_view unit = "") {
            throwInvalidArgument("RedisStorage::Options.{} {} (got {}{})",
                                 {field, rule, value, unit});
        };
        constexpr int kMaxPort = 65535;
        if (options.unixSocket.empty() && (options.port < 1 || options.port > kMaxPort)) {
            bad("port", "must be in 1..65535", options.port);
        }
        constexpr std::size_t kMaxUnixPath = sizeof(sockaddr_un::sun_path) - 1;
        if (options.unixSocket.size() > kMaxUnixPath) {
            bad("unixSocket", "must be at most " + std::to_string(kMaxUnixPath) + " bytes",
                options.unixSocket.size(), " bytes");
        }
        if (options.unixSocket.empty() && options.host.empty()) {
            throwInvalidArgument(
                "RedisStorage::Options.host must not be empty without a "
                "unixSocket");
        }
        if (options.database < 0) {
            bad("database", "must be >= 0", options.database);
        }
        if (options.timeout < std::chrono::milliseconds{1} ||
            options.timeout > std::chrono::minutes{1}) {
            bad("timeout", "must be in 1ms..1min", options.timeout.count(), "ms");
        }
        if (options.poolSize < 1 || options.poolSize > 1024) {
            bad("poolSize", "must be in 1..1024", options.poolSize);
        }
        if (options.keyPrefix.find_first_of("{}") != std::string::npos) {
            throwInvalidArgument(
                "RedisStorage::Options.keyPrefix must not contain '{' or '}' (got \"{}\")",
                {options.keyPrefix});
        }
        if (options.breakerBackoff < std::chrono::milliseconds{1} ||
            options.breakerMaxBackoff < options.breakerBackoff) {
            throwInvalidArgument(
                "RedisStorage::Options.breakerBackoff must be >= 1ms and <= "
                "breakerMaxBackoff");
        }
        if (options.fallbackMaxKeys < 1) {
            throwInvalidArgument("RedisStorage::Options.fallbackMaxKeys must be >= 1");
        }
        if (options.pipelineConnections < 1 || options.pipelineConnections > 1024) {
            bad("pipelineConnections", "must be in 1..1024", options.pipelineConnections);
        }
        if (options.maxPipeline < 1 || options.maxPipeline > 65536) {
            bad("maxPipeline", "must be in 1..65536", options.maxPipeline);
        }
        checkCluster(options);
        return options;
    }

    /// The Cluster options: seeds that can be reached over TCP, database 0.
    static void checkCluster(const RedisStorageOptions& options) {
        if (options.cluster.empty()) {
            return;
        }
        constexpr int kMaxPort = 65535;
        if (options.cluster.size() > RedisCluster::kMaxNodes) {
            throwInvalidArgument(
                "RedisStorage::Options.cluster must list at most {} nodes (got {})",
                {RedisCluster::kMaxNodes, options.cluster.size()});
        }
        for (std::size_t i = 0; i < options.cluster.size(); ++i) {
            const RedisNodeAddress& node = options.cluster[i];
            if (node.host.empty() || node.port < 1 || node.port > kMaxPort) {
                throwInvalidArgument(
                    "RedisStorage::Options.cluster[{}] needs a host and a port in 1..65535 (got "
                    "\"{}\" port {})",
                    {i, node.host, node.port});
            }
        }
        if (!options.unixSocket.empty()) {
            throwInvalidArgument(
                "RedisStorage::Options.unixSocket must be empty with cluster (Cluster nodes "
                "announce TCP addresses)");
        }
        if (options.database != 0) {
            throwInvalidArgument(
                "RedisStorage::Options.database must be 0 with cluster (got {}): a Cluster has "
                "one database",
                {options.database});
        }
        if (options.clusterRefreshInterval < std::chrono::milliseconds{1} ||
            options.clusterRefreshInterval > std::chrono::minutes{1}) {
            throwInvalidArgument(
                "RedisStorage::Options.clusterRefreshInterval must be in 1ms..1min (got {}ms)",
                {options.clusterRefreshInterval.count()});
        }
    }
};

/// A limiter's fallback table (`FailurePolicy::kFallBackToMemory`), one per process
/// (`PerProcess`): a forked child makes its own on its first degraded call and never touches its
/// parent's, whose slots a parent's thread may have held locked at the fork.
template <RedisModel M>
class RedisFallback final : public RefCounted {
public:
    RedisFallback(std::size_t maxKeys, LimiterOptions options, const QuotaOf<M>& quota,
                  const RedisLink& link)
        : maxKeys_(maxKeys), options_(std::move(options)), quota_(quota), tables_(make(link)) {}

    /// The table of the process whose link is `link`.
    MemoryStorage::Table<M>& of(const RedisLink& link) {
        return tables_.current([&] { return make(link); }).table;
    }

    /// Enforces `quota` in this process's table from the tick after `readNow()`.
    template <class ReadNow>
    void setQuota(const QuotaOf<M>& quota, const RedisLink& link, ReadNow readNow) {
        {
            const std::lock_guard<std::mutex> guard(lock_);
            quota_ = quota;
        }
        of(link).setQuota(quota, readNow);
    }

private:
    struct Made {
        /// Its link's answer: one process made both.
        [[nodiscard]] bool forked() const noexcept { return link->forked(); }

        const RedisLink* link;  // the link of the process that made it
        MemoryStorage::Table<M> table;
    };

    [[nodiscard]] std::unique_ptr<Made> make(const RedisLink& link) const {
        const QuotaOf<M> quota = [&] {
            const std::lock_guard<std::mutex> guard(lock_);
            return quota_;
        }();
        return std::make_unique<Made>(
            Made{&link, MemoryStorage(MemoryStorage::Options{.maxKeys = maxKeys_})
                            .template table<M>(options_, quota)});
    }

    std::size_t maxKeys_;
    LimiterOptions options_;
    mutable std::mutex lock_;
    QuotaOf<M> quota_;  // guarded by lock_: what a table made from now on enforces
    PerProcess<Made> tables_;
};

}  // namespace detail

/// One limiter's view of a `RedisStorage`: its key prefix, its script, its failure policy.
/// Thread safety: thread-safe; copies share the storage.
template <RedisModel M>
class RedisStorage::Table {
public:
    /// A limit set's members' decisions (`LimitSetModel::Decisions`), a tiered model's call
    /// (`TierCall`); empty otherwise.
    using Each = detail::EachOf<M>;
    /// The model each call's script runs: a tiered model's inner one, or `M`.
    using Scripted = detail::ScriptedOf<M>;

    Table(detail::Ref<detail::RedisShared> shared, const LimiterOptions& options,
          const QuotaOf<M>& quota)
        : shared_(std::move(shared)),
          keyPrefixes_(keyPrefixes(shared_->options.keyPrefix + ":" + options.name + ":" +
                                   std::string(M::kName))),
          script_(detail::ScriptForms::of(&detail::scriptOf<M>)),
          lease_(detail::Ref<detail::LazyScriptForms>::make(&leaseScript)),
          enforced_(detail::Ref<Epochs>::make(Enforced{quota, detail::quotaArguments<M>(quota)})),
          policy_(options.failurePolicy),
          fallback_(detail::Ref<detail::RedisFallback<M>>::make(
              shared_->options.fallbackMaxKeys, options, quota, shared_->links.current())),
          listening_(shared_->listeners.hold(options.listener)) {}

    /// One check at the time `now` gives (µs ticks of the limiter's clock), read just before
    /// the request is sent.
    [[nodiscard]] Decision step(std::string_view key, detail::TickSource now, std::int64_t cost,
                                StepMode mode, Each* each = nullptr) const {
        const Tick tick = now();
        const auto atTick = [tick] { return tick; };
        return call(key, detail::decimal(tick), 0, cost, mode, detail::TickSource(atTick), each);
    }

    /// One check at the server's `TIME`, minus the key's window phase (µs).
    [[nodiscard]] Decision stepAtStoreTime(std::string_view key, Tick phase, std::int64_t cost,
                                           StepMode mode, Each* each = nullptr) const {
        const auto local = [phase] { return detail::satSub(hostMicros(), phase); };
        return call(key, std::string(), phase, cost, mode, detail::TickSource(local), each);
    }

    /// Whether the model keeps a lease ledger (`lease`): a plain token or leaky bucket.
    static constexpr bool kLeasable =
        M::kBucket && !detail::kIsLimitSet<M> && !detail::kIsPenalized<M> && !detail::kIsTiered<M>;

    /// A `LeasedLimiter`'s call at the time `now` gives: the step of `lease.cost` and this
    /// host's entry in the key's lease ledger, in one script (`detail::kLuaLeaseMain`).
    [[nodiscard]] Decision lease(std::string_view key, detail::TickSource now,
                                 const detail::LeaseCall& lease) const requires kLeasable {
        const Tick tick = now();
        const auto atTick = [tick] { return tick; };
        return call(key, detail::decimal(tick), 0, lease.cost, StepMode::kConsume,
                    detail::TickSource(atTick), nullptr, &lease);
    }

    /// `lease` at the server's `TIME`.
    [[nodiscard]] Decision leaseAtStoreTime(
        std::string_view key, const detail::LeaseCall& lease) const requires kLeasable {
        const auto local = [] { return hostMicros(); };
        return call(key, std::string(), 0, lease.cost, StepMode::kConsume,
                    detail::TickSource(local), nullptr, &lease);
    }

    /// Deletes the key's state in Redis, its lease ledger included (and in the fallback table).
    void reset(std::string_view key) const {
        detail::RedisLink& link = shared_->links.current();
        fallback_->of(link).reset(key);
        std::vector<std::string> keys = redisKeys(key);
        if constexpr (kLeasable) {
            keys.push_back(ledgerKey(key));
        }
        std::string request;
        detail::appendCommandHeader(request, 1 + keys.size());
        detail::appendArgument(request, "DEL");
        for (const std::string& k : keys) {
            detail::appendArgument(request, k);
        }
        const detail::Deadline deadline = shared_->deadline();
        detail::RedisRoute route = link.route(keys.front(), deadline);
        std::size_t redirects = 0;
        auto pause = kFirstTryAgainPause;
        for (;;) {
            detail::RedisNode& node = *route.node;
            const auto admission = node.breaker.admit();
            if (!admission.proceed) {
                return;  // no I/O during an outage; the key expires on its own
            }
            detail::IoStatus status;
            const detail::ReplyPtr reply = exchange(node, route.asking, request, deadline, status);
            if (reply && reply->type == REDIS_REPLY_ERROR) {
                const std::string_view text(reply->str, reply->len);
                status = {detail::classifyErrorReply(text), std::string(text)};
            }
            if (status.ok()) {
                succeeded(link, node, admission);
                return;
            }
            if (const auto next = follow(link, node, status, redirects)) {
                succeeded(link, node, admission);
                route = *next;
                ++redirects;
                continue;
            }
            if (pausedToTryAgain(status, deadline, pause)) {
                succeeded(link, node, admission);
                route = link.route(keys.front(), deadline);
                continue;
            }
            failed(link, node, admission, status, deadline);
            return;
        }
    }

    /// The Redis keys holding `key`'s state, `<keyPrefix>:<name>:<model>:v<kStateVersion><tag>`;
    /// for a limit set one per member, `<keyPrefix>:<name>:<set>:<i>:<model>:v<N><tag>`, where
    /// `<set>` joins the members' names with `+` and `i` counts from 0. The version keeps a
    /// state written in another encoding from being read; the tag is `hashTag`'s.
    /// Each key is built in place, one allocation each, and the tag once (this runs on every
    /// check).
    [[nodiscard]] std::vector<std::string> redisKeys(std::string_view key) const {
        std::vector<std::string> keys;
        keys.reserve(keyPrefixes_.size());
        keys.push_back(taggedKey(key, keyPrefixes_.front()));
        const std::string_view tag =
            std::string_view(keys.front()).substr(keyPrefixes_.front().size());
        for (std::size_t i = 1; i < keyPrefixes_.size(); ++i) {
            std::string& k = keys.emplace_back();
            k.reserve(keyPrefixes_[i].size() + tag.size());
            k.append(keyPrefixes_[i]).append(tag);
        }
        return keys;
    }

    /// `{<length>:<key>}`, or for a key longer than `maxKeyBytes` `{#<digest>}`, its keyed
    /// digest in 32 hex digits. The length prefix keeps the encoding injective (a digest's tag
    /// starts with `#`, never a digit) and the tag non-empty (the empty key included), so one
    /// check, all of a set's members included, stays in one Cluster slot.
    [[nodiscard]] std::string hashTag(std::string_view key) const { return taggedKey(key, {}); }

    /// `d` in 32 lowercase hex digits, its high word first.
    static std::string hexOf(const detail::Digest128& d) {
        constexpr std::string_view kDigits = "0123456789abcdef";
        constexpr unsigned kNibble = 4;
        constexpr std::uint64_t kNibbleMask = 0xF;
        constexpr unsigned kWordBits = 64;
        std::string out;
        for (const std::uint64_t word : {d.high, d.low}) {
            for (unsigned shift = kWordBits; shift > 0;) {
                shift -= kNibble;
                out.push_back(kDigits[(word >> shift) & kNibbleMask]);
            }
        }
        return out;
    }

    /// The Redis key of `key`'s lease ledger, `<its state's key prefix>:leases<tag>`: a hash of
    /// host to the tokens it may hold unspent and when the store takes them back, in the same
    /// slot as the state.
    [[nodiscard]] std::string ledgerKey(std::string_view key) const requires kLeasable {
        return taggedKey(key, keyPrefixes_.front(), ":leases");
    }

    /// The Redis key of a single model's `key` (see `redisKeys`).
    [[nodiscard]] std::string redisKey(std::string_view key) const
        requires(!detail::kIsLimitSet<Scripted>) {
        return std::move(redisKeys(key).front());
    }

    [[nodiscard]] const std::string& script() const noexcept { return script_.text; }
    [[nodiscard]] const std::string& scriptSha() const noexcept { return script_.sha; }
    /// The script as a function library (`RedisStorageOptions::functions`), and its function.
    [[nodiscard]] const std::string& scriptLibrary() const noexcept { return script_.library; }
    [[nodiscard]] const std::string& scriptFunction() const noexcept { return script_.function; }

    /// The quota in force.
    [[nodiscard]] const QuotaOf<M>& quota() const noexcept {
        return enforced_->current().value.quota;
    }

    /// Sends `quota` with every call from now on (each key's state records the limit it was
    /// written under, and the script carries it over), and enforces it in the fallback table.
    /// Throws: `std::invalid_argument` as `RedisStorage::table`.
    template <class ReadNow>
    void setQuota(const QuotaOf<M>& quota, ReadNow readNow) const {
        detail::checkRange<M>(quota, detail::kRedisRange);
        enforced_->replace(Enforced{quota, detail::quotaArguments<M>(quota)}, readNow);
        fallback_->setQuota(quota, shared_->links.current(), readNow);
    }

private:
    /// `prefix`, then `qualifier`, then `key`'s `hashTag`, reserved once: every check builds
    /// its keys, and a lease call its ledger's too.
    [[nodiscard]] std::string taggedKey(std::string_view key, std::string_view prefix,
                                        std::string_view qualifier = {}) const {
        const RedisStorageOptions& o = shared_->options;
        const std::size_t head = prefix.size() + qualifier.size();
        std::string out;
        if (key.size() > o.maxKeyBytes) {
            const detail::SipHash128 digest(o.keyDigestKey[0], o.keyDigestKey[1]);
            const std::string hex = hexOf(digest(key));
            out.reserve(head + hex.size() + 3);
            out.append(prefix).append(qualifier).append("{#").append(hex).append("}");
            return out;
        }
        const detail::DecimalText length(key.size());
        out.reserve(head + length.view().size() + key.size() + 3);
        out.append(prefix).append(qualifier).append("{").append(length.view()).append(":");
        out.append(key).append("}");
        return out;
    }

    /// This host's system clock in µs: the time a call at the server's `TIME` falls back to.
    static Tick hostMicros() noexcept { return detail::hostTicks(RedisStorage::kNanosPerTick); }

    /// A quota and the arguments that send it.
    struct Enforced {
        QuotaOf<M> quota;
        std::vector<std::string> arguments;
    };
    /// Shared by the table's copies, so a change reaches all of them.
    using Epochs = detail::LimitEpochs<Enforced>;

    /// A leasable model's lease script, or empty.
    static detail::ScriptForms leaseScript() {
        if constexpr (kLeasable) {
            return detail::ScriptForms::of([](detail::ScriptForm form) {
                return detail::composeScript(detail::scriptModel<M>(), detail::kQuotaArgumentNames,
                                             detail::kLuaLeaseMain, form);
            });
        } else {
            return {};
        }
    }

    /// The key prefixes of the model's state, one per member for a set (see `redisKeys`).
    static std::vector<std::string> keyPrefixes(const std::string& base) {
        if constexpr (detail::kIsLimitSet<Scripted>) {
            std::vector<std::string> prefixes;
            Scripted::forEach([&]<std::size_t I>() {
                using Member = typename Scripted::template Member<I>;
                prefixes.push_back(base + ":" + std::to_string(I) + ":" +
                                   std::string(Member::kName) + ":v" +
                                   std::to_string(Member::kStateVersion));
            });
            return prefixes;
        } else {
            return {base + ":v" + std::to_string(M::kStateVersion)};
        }
    }

    /// Redirects one call follows, as other Cluster clients do: more means the map is changing
    /// faster than the call can follow.
    static constexpr std::size_t kMaxRedirects = 5;

    /// One call of the model's script, or with `lease` of its lease script. `fallbackNow` is
    /// the time the fallback table steps at, read only when the call falls back: a check that
    /// Redis answers reads no clock for it.
    [[nodiscard]] Decision call(std::string_view key, const std::string& now, Tick phase,
                                std::int64_t cost, StepMode mode, detail::TickSource fallbackNow,
                                Each* each, const detail::LeaseCall* lease = nullptr) const {
        detail::RedisLink& link = shared_->links.current();
        const Enforced& enforced = enforced_->current().value;
        std::vector<std::string> keys = redisKeys(key);
        if constexpr (kLeasable) {
            if (lease != nullptr) {
                keys.push_back(ledgerKey(key));
            }
        }
        const detail::Deadline deadline = shared_->deadline();
        const detail::ScriptCall script{now, cost, mode, phase};
        detail::RedisRoute route = link.route(keys.front(), deadline);
        std::size_t redirects = 0;
        auto pause = kFirstTryAgainPause;
        for (;;) {
            detail::RedisNode& node = *route.node;
            const auto admission = node.breaker.admit();
            if (!admission.proceed) {
                shared_->shortCircuited.fetch_add(1, std::memory_order_relaxed);
                link.nodeFailed(deadline);
                return degrade(link, {StoreError::kCircuitOpen, "the circuit breaker is open"}, key,
                               cost, mode, fallbackNow, admission.wait, each, enforced.quota);
            }
            detail::IoStatus status;
            const std::optional<Decision> answer =
                run(node, route.asking, keys, script, deadline, status, each, enforced, lease);
            if (answer) {
                succeeded(link, node, admission);
                link.afterCall(deadline);
                return *answer;
            }
            if (const auto next = follow(link, node, status, redirects)) {
                succeeded(link, node, admission);  // the node answered
                route = *next;
                ++redirects;
                continue;
            }
            if (pausedToTryAgain(status, deadline, pause)) {
                succeeded(link, node, admission);  // the node answered
                route = link.route(keys.front(), deadline);
                continue;
            }
            failed(link, node, admission, status, deadline);
            return degrade(link, status, key, cost, mode, fallbackNow, node.breaker.untilProbe(),
                           each, enforced.quota);
        }
    }

    /// Tells `node`'s breaker that the call it let through as `admission` was answered, and
    /// reports a change of health.
    void succeeded(detail::RedisLink& link, detail::RedisNode& node,
                   const detail::CircuitBreaker::Admission& admission) const {
        shared_->report(link.about(node, node.breaker.succeeded(admission)));
    }

    /// Tells `node`'s breaker that the call it let through failed with `status`, reports a
    /// change of health, and after an outage has a Cluster's map read again when due.
    void failed(detail::RedisLink& link, detail::RedisNode& node,
                const detail::CircuitBreaker::Admission& admission, const detail::IoStatus& status,
                detail::Deadline deadline) const {
        const bool outage = detail::outage(status);
        shared_->report(
            link.about(node, node.breaker.failed(admission, status.error, status.message, outage)));
        if (outage) {
            link.nodeFailed(deadline);
        }
    }

    /// The first pause before a call refused with `TRYAGAIN` is sent again, and the longest
    /// (each pause doubles the one before).
    static constexpr std::chrono::milliseconds kFirstTryAgainPause{1};
    static constexpr std::chrono::milliseconds kLongestTryAgainPause{32};

    /// Whether a `TRYAGAIN` reply (a migration has split the call's keys between two nodes for
    /// now; nothing ran) was waited out for `pause`, which then doubles, so that the call is
    /// sent again: only while its deadline leaves room for the pause. Other Cluster clients
    /// retry it the same way; the split lasts until the migration has moved the slot's keys.
    bool pausedToTryAgain(const detail::IoStatus& status, detail::Deadline deadline,
                          std::chrono::milliseconds& pause) const {
        if (status.error != StoreError::kClusterDown ||
            !std::string_view(status.message).starts_with("TRYAGAIN") ||
            std::chrono::steady_clock::now() + pause >= deadline) {
            return false;
        }
        detail::pauseFor(pause);
        pause = std::min(pause * 2, kLongestTryAgainPause);
        shared_->tryAgainRetries.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

    /// The route of a `MOVED` or `ASK` reply of `node`, counted, while the call may follow
    /// one more; nullopt otherwise, and with one server.
    std::optional<detail::RedisRoute> follow(detail::RedisLink& link, const detail::RedisNode& node,
                                             const detail::IoStatus& status,
                                             std::size_t redirects) const {
        if (status.error != StoreError::kRedirected || redirects >= kMaxRedirects) {
            return std::nullopt;
        }
        std::optional<detail::RedisRoute> next = link.redirect(status.message, node);
        if (next) {
            (next->asking ? shared_->askFollowed : shared_->movedFollowed)
                .fetch_add(1, std::memory_order_relaxed);
        }
        return next;
    }

    /// What a call sends after its own arguments: the quota's (`callArguments`), then a
    /// lease's.
    struct CallArguments {
        std::span<const std::string> quota;
        std::vector<std::string> lease;
    };

    std::optional<Decision> run(detail::RedisNode& node, bool asking,
                                const std::vector<std::string>& keys,
                                const detail::ScriptCall& script, detail::Deadline deadline,
                                detail::IoStatus& status, Each* each, const Enforced& enforced,
                                const detail::LeaseCall* lease) const {
        const CallArguments arguments{
            callArguments(enforced, each),
            lease != nullptr ? leaseArguments(*lease) : std::vector<std::string>{}};
        const detail::ScriptForms& forms = lease != nullptr ? lease_->get() : script_;
        detail::ReplyPtr reply;
        const bool tried = shared_->functions.load(std::memory_order_relaxed);
        if (!tried ||
            !callFunction(node, asking, keys, script, arguments, forms, deadline, status, reply)) {
            if (tried) {
                shared_->scriptResends.fetch_add(1, std::memory_order_relaxed);
            }
            reply =
                send(node, asking, "EVALSHA", forms.sha, keys, script, arguments, deadline, status);
            if (reply && isNoScript(*reply)) {
                // The script did not run (restart, failover, SCRIPT FLUSH, a node that never
                // ran it): sent whole, once.
                shared_->scriptResends.fetch_add(1, std::memory_order_relaxed);
                reply = send(node, asking, "EVAL", forms.text, keys, script, arguments, deadline,
                             status);
            }
        }
        if (!reply) {
            return std::nullopt;
        }
        return parse(*reply, status, detail::callEach<M>(each),
                     detail::callQuota<M>(enforced.quota, each));
    }

    /// The call as an `FCALL` of `forms`' function, into `reply` (null when the link failed),
    /// after loading its library where `node` lacks it (restart, failover, `FUNCTION FLUSH`, a
    /// node that never ran it). False when the call must go as `EVALSHA` instead: the server
    /// refused the function before running it (`OOM`: a function that writes does not start at
    /// `maxmemory`, where an `EVALSHA` still answers refusals), or has none for this storage
    /// (Redis 6, an ACL without `FCALL` or `FUNCTION LOAD`, a library it would not load), after
    /// which no call tries one again.
    [[nodiscard]] bool callFunction(detail::RedisNode& node, bool asking,
                                    const std::vector<std::string>& keys,
                                    const detail::ScriptCall& script,
                                    const CallArguments& arguments,
                                    const detail::ScriptForms& forms, detail::Deadline deadline,
                                    detail::IoStatus& status, detail::ReplyPtr& reply) const {
        reply =
            send(node, asking, "FCALL", forms.function, keys, script, arguments, deadline, status);
        if (reply && startsWith(*reply, "ERR Function not found")) {
            std::string request;
            detail::appendCommand(request, {"FUNCTION", "LOAD", forms.library});
            shared_->requests.fetch_add(1, std::memory_order_relaxed);
            shared_->scriptResends.fetch_add(1, std::memory_order_relaxed);
            reply = exchange(node, false, request, deadline, status);
            if (!reply) {
                return true;
            }
            const bool loaded = reply->type != REDIS_REPLY_ERROR;
            if (!loaded && !alreadyLoaded(*reply)) {
                // The load's refusal: EVALSHA where that may run the call; any other refusal
                // (READONLY after a failover, …) is the call's answer.
                return !refusedFunction(*reply);
            }
            shared_->functionLoads.fetch_add(loaded ? 1 : 0, std::memory_order_relaxed);
            shared_->scriptResends.fetch_add(1, std::memory_order_relaxed);
            reply = send(node, asking, "FCALL", forms.function, keys, script, arguments, deadline,
                         status);
        }
        return !reply || reply->type != REDIS_REPLY_ERROR || !refusedFunction(*reply);
    }

    /// Whether `error`, the reply to an `FCALL` or a `FUNCTION LOAD`, means the call must go as
    /// `EVALSHA`: `OOM`, or a server with no functions for this storage (an unknown command, a
    /// `NOPERM` for the command rather than for a key, a library it would not register), after
    /// which none are tried again.
    [[nodiscard]] bool refusedFunction(const redisReply& error) const {
        if (startsWith(error, "OOM")) {
            return true;
        }
        const bool unavailable =
            startsWith(error, "ERR unknown command") || startsWith(error, "ERR Error ") ||
            (startsWith(error, "NOPERM") &&
             std::string_view(error.str, error.len).find(" command") != std::string_view::npos);
        if (unavailable) {
            shared_->functions.store(false, std::memory_order_relaxed);
        }
        return unavailable;
    }

    /// A `FUNCTION LOAD` refused because another caller loaded the same library first.
    [[nodiscard]] static bool alreadyLoaded(const redisReply& error) {
        return startsWith(error, "ERR Library") &&
               std::string_view(error.str, error.len).ends_with("already exists");
    }

    [[nodiscard]] static bool startsWith(const redisReply& reply, std::string_view prefix) {
        return reply.type == REDIS_REPLY_ERROR &&
               std::string_view(reply.str, reply.len).starts_with(prefix);
    }

    /// A lease call's arguments, `detail::kLeaseArguments`.
    static std::vector<std::string> leaseArguments(const detail::LeaseCall& lease) {
        std::vector<std::string> arguments;
        const auto lifeUs = detail::ceilDiv(lease.life.count(), std::int64_t{1000});
        const std::array numbers{lease.recorded, lease.returned, lease.held, lease.leased, lifeUs};
        static_assert(detail::kLeaseArguments.size() == 1 + std::tuple_size_v<decltype(numbers)>,
                      "the host, then the numbers");
        arguments.emplace_back(lease.host);
        for (const std::int64_t v : numbers) {
            arguments.push_back(detail::decimal(v));
        }
        return arguments;
    }

    /// The quota arguments a call sends: its tier's, for a tiered model.
    static std::span<const std::string> callArguments(const Enforced& enforced,
                                                      const Each* each) noexcept {
        if constexpr (detail::kIsTiered<M>) {
            const std::size_t perTier = enforced.arguments.size() / enforced.quota.tiers.size();
            const std::size_t tier = each != nullptr ? each->tier : 0;
            return std::span<const std::string>(enforced.arguments)
                .subspan(tier * perTier, perTier);
        } else {
            (void)each;
            return enforced.arguments;
        }
    }

    detail::ReplyPtr send(detail::RedisNode& node, bool asking, std::string_view verb,
                          std::string_view scriptOrSha, std::span<const std::string> keys,
                          const detail::ScriptCall& script, const CallArguments& arguments,
                          detail::Deadline deadline, detail::IoStatus& status) const {
        std::string request;
        detail::appendScriptRequest(request, verb, scriptOrSha, keys, script, arguments.quota,
                                    arguments.lease);
        shared_->requests.fetch_add(1, std::memory_order_relaxed);
        return exchange(node, asking, request, deadline, status);
    }

    /// `request`'s reply from `node`, after `ASKING` when an `ASK` sent it there.
    static detail::ReplyPtr exchange(detail::RedisNode& node, bool asking, std::string_view request,
                                     detail::Deadline deadline, detail::IoStatus& status) {
        return asking ? node.pool.exchangeAsking(request, deadline, status)
                      : node.pool.exchange(request, deadline, status);
    }

    static bool isNoScript(const redisReply& reply) { return startsWith(reply, "NOSCRIPT"); }

    /// The script's reply: {outcome (`detail::kReplyAdmitted` …), remaining, retry, reset} for
    /// a single model; for a set {allowed, then allowed, remaining, retry, reset per member}.
    std::optional<Decision> parse(const redisReply& reply, detail::IoStatus& status,
                                  detail::EachOf<Scripted>* each,
                                  const QuotaOf<Scripted>& quota) const {
        if (reply.type == REDIS_REPLY_ERROR) {
            const std::string_view text(reply.str, reply.len);
            status = {detail::classifyErrorReply(text), std::string(text)};
            return std::nullopt;
        }
        constexpr std::size_t kFields = replyFields();
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
        // The limit is the quota's capacity: the decision builders fill it in.
        if constexpr (detail::kIsLimitSet<Scripted>) {
            typename Scripted::Decisions members;
            for (std::size_t i = 0; i < Scripted::kSize; ++i) {
                const std::int64_t* f = &v[1 + kMemberFields * i];
                members[i] = decisionOf(quota.members[i], f[0] != 0, f[1], f[2], f[3]);
            }
            const Decision d = Scripted::bind(members, quota);
            if (each != nullptr) {
                *each = members;
            }
            return d;
        } else {
            (void)each;
            Decision d = decisionOf(quota, v[0] == detail::kReplyAdmitted, v[1], v[2], v[3]);
            d.penaltyStarted = v[0] == detail::kReplyPenaltyStarted;
            return d;
        }
    }

    /// A member's fields in a set's reply: allowed, remaining, retry, reset.
    static constexpr std::size_t kMemberFields = 4;

    /// The script's reply: a single model's 4 fields (outcome, remaining, retry, reset), or a
    /// set's allowed and its members' fields.
    static constexpr std::size_t replyFields() noexcept {
        constexpr std::size_t kSingleFields = 4;
        if constexpr (detail::kIsLimitSet<Scripted>) {
            return 1 + kMemberFields * Scripted::kSize;
        } else {
            return kSingleFields;
        }
    }

    static Decision decisionOf(const Quota& q, bool allowed, std::int64_t remaining,
                               std::int64_t retry, std::int64_t reset) noexcept {
        if (allowed) {
            return detail::admitted(q, remaining, reset);
        }
        return retry < 0 ? detail::refusedForever(q, remaining, reset)
                         : detail::refused(q, remaining, retry, reset);
    }

    /// The declared failure policy's answer; every one is marked degraded (a set's members'
    /// too).
    [[nodiscard]] Decision degrade(const detail::RedisLink& link, const detail::IoStatus& status,
                                   std::string_view key, std::int64_t cost, StepMode mode,
                                   detail::TickSource now, std::chrono::nanoseconds untilProbe,
                                   Each* each, const QuotaOf<M>& quota) const {
        shared_->failures.fetch_add(1, std::memory_order_relaxed);
        shared_->failuresByKind[static_cast<std::size_t>(status.error)].fetch_add(
            1, std::memory_order_relaxed);
        if (policy_ == FailurePolicy::kThrow) {
            throw StoreException(status.error, status.message);
        }
        Decision d;
        if (policy_ == FailurePolicy::kFallBackToMemory) {
            d = fallback_->of(link).step(key, now, cost, mode, each);
            return markDegraded(d, each);
        }
        // A refund's or strikes' answer is the key's figures, which the policy can only
        // invent for a zero cost; the refund or the strikes are lost with the store.
        const std::int64_t asked = mode > StepMode::kConsume ? 0 : cost;
        const QuotaOf<Scripted>& called = detail::callQuota<M>(quota, each);
        if constexpr (detail::kIsLimitSet<Scripted>) {
            typename Scripted::Decisions members;
            for (std::size_t i = 0; i < Scripted::kSize; ++i) {
                members[i] = answered(called.members[i].capacity, asked, untilProbe);
            }
            d = Scripted::bind(members, called);
            if (detail::EachOf<Scripted>* inner = detail::callEach<M>(each); inner != nullptr) {
                *inner = members;
            }
        } else {
            d = answered(called.capacity, asked, untilProbe);
        }
        return markDegraded(d, each);
    }

    /// `d` and a set's members' decisions, marked degraded.
    static Decision markDegraded(Decision d, Each* each) noexcept {
        d.degraded = true;
        if (each != nullptr) {
            detail::forEachDecision(*each, [](Decision& member) { member.degraded = true; });
        }
        return d;
    }

    /// What fail-open or fail-closed answers for a limit of `limit`.
    [[nodiscard]] Decision answered(std::int64_t limit, std::int64_t cost,
                                    std::chrono::nanoseconds untilProbe) const noexcept {
        Decision d;
        d.limit = limit;
        if (policy_ == FailurePolicy::kFailOpen) {
            d.allowed = cost <= limit;
            d.remaining = cost <= limit ? limit - cost : limit;
            d.retryAfter = cost <= limit ? std::chrono::nanoseconds{0} : Decision::kNever;
        } else {
            d.allowed = false;
            d.remaining = 0;
            d.retryAfter = cost <= limit ? untilProbe : Decision::kNever;
        }
        return d;
    }

    detail::Ref<detail::RedisShared> shared_;
    std::vector<std::string> keyPrefixes_;
    detail::ScriptForms script_;
    detail::Ref<detail::LazyScriptForms> lease_;  // a leasable model's, or empty
    detail::Ref<Epochs> enforced_;
    FailurePolicy policy_;
    detail::Ref<detail::RedisFallback<M>> fallback_;
    detail::Ref<detail::ListenerHold> listening_;  // after `shared_`, which holds its list
};

}  // namespace v1
}  // namespace ratelimit
