#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/function.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {

/// Counters of a `RedisStorage`, shared by its copies.
struct RedisStats {
    /// Requests sent to run a script: `FCALL` or `EVALSHA`, plus the resends below.
    std::uint64_t requests = 0;
    /// Requests beyond a call's first, sent because its script did not run there: `EVAL`
    /// after `NOSCRIPT`, `FUNCTION LOAD` and the `FCALL` again after a missing function, and
    /// `EVALSHA` after an `FCALL` the server refused before running it (`functions`). So
    /// `requests - scriptResends` is the calls that reached the server.
    std::uint64_t scriptResends = 0;
    std::uint64_t connectsOpened = 0;  ///< connections opened (and handshakes done)
    std::uint64_t failures = 0;        ///< calls answered by the failure policy
    std::uint64_t shortCircuited = 0;  ///< of those, answered at once by the open breaker
    /// Writes that carried requests: below `requests` when pipelining gathered several
    /// callers' requests into one write.
    std::uint64_t writes = 0;
    /// `failures` by kind, indexed by `StoreError` (`kCircuitOpen`: `shortCircuited`); read
    /// with `failuresOf`.
    std::array<std::uint64_t, kStoreErrorKinds> failuresByKind{};
    /// Redis Cluster: `MOVED` replies followed (each call's script then went to the slot's
    /// new master), `ASK` replies followed (`ASKING`, then the script, on the node importing
    /// the slot), and reads of the slot map.
    std::uint64_t movedFollowed = 0;
    std::uint64_t askFollowed = 0;
    std::uint64_t slotMapReads = 0;
    /// Redis Cluster: calls sent again after a pause because a migration had split their keys
    /// (`TRYAGAIN`).
    std::uint64_t tryAgainRetries = 0;
    /// `functions`: function libraries loaded (`FUNCTION LOAD`), on a server that lacked one.
    std::uint64_t functionLoads = 0;

    /// The calls of `failures` that failed with `kind`.
    [[nodiscard]] constexpr std::uint64_t failuresOf(StoreError kind) const noexcept {
        return failuresByKind[static_cast<std::size_t>(kind)];
    }
};

// NOLINTBEGIN(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers): defaults, each
// documented where it is set.

/// A Redis Cluster node to start from (`RedisStorageOptions::cluster`).
struct RedisNodeAddress {
    std::string host;  ///< TCP host name or address
    int port = 6379;   ///< TCP port, 1 … 65535
};

/// Options of a `RedisStorage` (`RedisStorage::Options`). Fields only ever get added at the
/// end.
struct RedisStorageOptions {
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
    /// Breaker backoff after the first failure, doubling per failed probe up to the max; also
    /// how long no call must fail before a success is heard as healthy again (`onEvent`).
    std::chrono::milliseconds breakerBackoff{100};
    std::chrono::milliseconds breakerMaxBackoff{5000};
    /// Entries of each limiter's memory table for `FailurePolicy::kFallBackToMemory`.
    std::size_t fallbackMaxKeys = 100'000;
    /// Hears health changes, from the calling thread, outside every lock; never once per
    /// request: failing at a call's failure of any kind while healthy, healthy at a success once
    /// the breaker is closed and no call failed for `breakerBackoff`. Must not throw.
    std::function<void(const StoreEvent&)> onEvent{};
    /// Concurrent calls share connections (pipelining): a caller queues its request on a
    /// connection; the first caller to find no one writing on it writes every queued request
    /// in one write, without waiting for the replies of earlier writes; a caller whose
    /// request is written and finds no one reading reads the replies in order and hands each
    /// caller its own, until it has its own. The others wait within their own deadline. No
    /// thread of the library's own. A request sent at most once, a late reply never given to
    /// another caller and a connection that saw an I/O error closed hold as without it; an
    /// I/O error of a shared connection fails every request in flight on it, and a caller
    /// whose deadline passes fails alone. Default true; false: one caller per pooled
    /// connection at a time.
    bool pipelining = true;
    /// With pipelining: the connections the callers share, 1 … 1024; at most `poolSize`
    /// are used. Default 2.
    std::size_t pipelineConnections = 2;
    /// With pipelining: the most requests one write carries, 1 … 65536. Default 64.
    std::size_t maxPipeline = 64;
    /// For tests and simulations: the clock the circuit breaker reads to time its backoff.
    /// Default (empty): `std::chrono::steady_clock`. Deadlines always use the steady clock.
    std::function<std::chrono::steady_clock::time_point()> breakerClock{};
    /// Keys longer than this many bytes go to Redis as their keyed 128-bit digest
    /// (`keyDigestKey`), so a client-chosen key of any size costs Redis a short key; shorter
    /// keys go as they are, readable. Default 128.
    std::size_t maxKeyBytes = 128;
    /// The SipHash-2-4 key of that digest. Every host sharing the server must use the same
    /// one, or they count a long key apart. The default is public: where clients choose keys,
    /// set a secret, so no client can aim a long key at another's digest.
    std::array<std::uint64_t, 2> keyDigestKey{0x7261746c696d6974ULL, 0x6b65796469676573ULL};
    /// Looks `host` up when a connection needs it (the first connect, and the first after a
    /// connect failed; never at construction): the addresses to try, in order, as text (IPv4
    /// or IPv6). Empty (default): the system resolver, `getaddrinfo`. For service discovery and
    /// tests. Called on the connecting thread, one lookup at a time; must not throw.
    std::function<std::vector<std::string>(const std::string& host)> resolve{};
    /// Redis Cluster: nodes to read the slot map from (any of its nodes; listing several lets
    /// the storage start while one is down). Each check then goes to the master serving its
    /// key's slot, over that node's own connections (`poolSize`, `pipelineConnections` per
    /// node) and past its own circuit breaker; `MOVED` and `ASK` are followed. `host`, `port`
    /// and `unixSocket` are unused, `database` must be 0. Empty (default): one server.
    std::vector<RedisNodeAddress> cluster{};
    /// With `cluster`: the least time between two reads of the slot map after the first
    /// (a `MOVED`, a node failing), however many calls ask for one. Default 100 ms; 1 ms … 1 min.
    std::chrono::milliseconds clusterRefreshInterval{100};
    /// Each limiter's script runs as a Redis function (Redis 7+): its library is loaded once
    /// per server (`FUNCTION LOAD`, on the first call that finds it missing) and each check is
    /// an `FCALL`, which spends the server less CPU than an `EVALSHA` of the same script (its
    /// helpers are defined, and its quota read, once per server, not per call). Where the
    /// server has no functions (Redis 6), or the ACL user may not call or load them, the
    /// storage goes over to `EVALSHA` for good at the first such reply; a call refused as
    /// `OOM` (a function that writes does not start at `maxmemory`) goes as `EVALSHA` alone,
    /// which still answers refusals. The libraries, `ratelimit_<SHA-1>`, stay on the server
    /// (and in its persistence and replicas) until removed by `FUNCTION DELETE`. Default true;
    /// false: `EVALSHA` only.
    bool functions = true;
};
// NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)

}  // namespace v1
}  // namespace ratelimit
