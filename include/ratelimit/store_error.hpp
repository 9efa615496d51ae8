#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ratelimit {
inline namespace v1 {

/// Why a shared store failed to answer. Kinds only ever get added at the end.
enum class StoreError {
    kNone,
    kTimeout,         ///< the deadline passed before the request was sent: it did not run
    kOutcomeUnknown,  ///< the deadline passed or the connection broke after the request was
                      ///< sent: it may or may not have run
    kUnreachable,     ///< connect failed (refused, no route, unresolvable address)
    kClosed,          ///< the server closed the connection before the request was sent
    kProtocol,        ///< a reply the client could not parse or did not expect
    kAuth,            ///< AUTH or SELECT was refused (wrong password, unknown user or db)
    kOutOfMemory,     ///< the server refused a write at `maxmemory` (refusals still answer)
    kRedirected,      ///< `MOVED`/`ASK` not followed (standalone, or beyond a Cluster call's)
    kReadOnly,        ///< the server is a read-only replica
    kBusy,            ///< the server is busy running another script
    kScript,          ///< the script failed (e.g. `WRONGTYPE` on a foreign key)
    kCircuitOpen,     ///< not tried: the circuit breaker is open after earlier failures
    kNoPermission,    ///< the ACL user may not run the script or touch its key (`NOPERM`)
    kMisconf,         ///< the server refuses writes after a failed save to disk (`MISCONF`)
    /// A Redis Cluster cannot serve the key's slot now (`CLUSTERDOWN`, or `TRYAGAIN` for as long
    /// as the call's timeout allowed while a migration split the slot's keys): the script did
    /// not run.
    kClusterDown,
};

/// How many kinds `StoreError` has (the last one's value plus one), for counts by kind.
inline constexpr std::size_t kStoreErrorKinds =
    static_cast<std::size_t>(StoreError::kClusterDown) + 1;

/// A stable lowercase name for `e`, for logs.
constexpr std::string_view toString(StoreError e) noexcept {
    switch (e) {
        case StoreError::kNone:
            return "none";
        case StoreError::kTimeout:
            return "timeout";
        case StoreError::kOutcomeUnknown:
            return "outcome_unknown";
        case StoreError::kUnreachable:
            return "unreachable";
        case StoreError::kClosed:
            return "closed";
        case StoreError::kProtocol:
            return "protocol";
        case StoreError::kAuth:
            return "auth";
        case StoreError::kOutOfMemory:
            return "out_of_memory";
        case StoreError::kRedirected:
            return "redirected";
        case StoreError::kReadOnly:
            return "read_only";
        case StoreError::kBusy:
            return "busy";
        case StoreError::kScript:
            return "script";
        case StoreError::kCircuitOpen:
            return "circuit_open";
        case StoreError::kNoPermission:
            return "no_permission";
        case StoreError::kMisconf:
            return "misconf";
        case StoreError::kClusterDown:
            return "cluster_down";
    }
    return "unknown";
}

/// Thrown by limiters whose failure policy is `FailurePolicy::kThrow`.
class StoreException : public std::runtime_error {
public:
    StoreException(StoreError code, const std::string& message)
        : std::runtime_error(std::string("ratelimit: store error (")
                                 .append(toString(code))
                                 .append("): ")
                                 .append(message)),
          code_(code) {}

    [[nodiscard]] StoreError code() const noexcept { return code_; }

private:
    StoreError code_;
};

/// A change of a store's health, as its hook hears it: once when calls start failing (with an
/// error of any kind), once when they succeed again — never once per request.
struct StoreEvent {
    enum class Health { kFailing, kHealthy };
    Health health = Health::kHealthy;
    StoreError error = StoreError::kNone;  ///< the first failure of the episode
    std::string message;                   ///< a human-readable detail
};

}  // namespace v1
}  // namespace ratelimit
