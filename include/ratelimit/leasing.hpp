#pragma once

// Local token leases over a shared bucket: a host takes several tokens from the store in one
// call and answers the next requests on the key from them, without a round trip
// (docs/semantics.md, "Token leases").

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/throw.hpp>

namespace ratelimit {
inline namespace v1 {

/// Options of a `LeasedLimiter`.
// NOLINTBEGIN(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers): defaults, each
// documented where it is set.
struct LeaseOptions {
    /// Tokens one lease takes from the store, the request that takes it included, 1 … 2^20.
    /// 1: every request goes to the store, exactly as without leasing. Default 16.
    std::int64_t tokens = 16;
    /// How long a host answers from a lease after taking it; what it did not use then goes
    /// back to the store. Default 1 s; 1 ms … 1 h.
    std::chrono::milliseconds lifetime{1000};
    /// Keys holding a lease at once in this host, 1 … 2^20; a key beyond them goes to the store
    /// for each request until an expired lease makes room. Default 1024.
    std::size_t maxKeys = 1024;
    /// For tests: the clock that times a lease's lifetime. Default (empty):
    /// `std::chrono::steady_clock`.
    std::function<std::chrono::steady_clock::time_point()> clock{};
};
// NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)

/// A bucket limiter (token or leaky bucket, over any storage; meant for Redis) whose hot keys
/// are answered from local leases: a request the key's lease cannot cover takes `tokens` at once
/// from the store, its own cost among them, and the following requests spend the rest here,
/// without a round trip, until they run out or the lease's `lifetime` passes. Then what is left
/// goes back to the store (a refund) and the next request takes a new lease.
///
/// Exactness: leased tokens are spent in the store when they are taken, so the store never
/// admits more than its bucket allows. What a lease changes is when they are spent: a host
/// spending leased tokens after the bucket refilled admits beyond what the exact bucket would,
/// by at most the tokens it holds unspent, so across hosts by at most `hosts × (tokens − 1)`,
/// and within a lease's `lifetime`. With `tokens == 1` nothing is leased and the decisions are
/// the limiter's own. Leases do not survive the host: a host that dies has spent its leased
/// tokens, which the bucket refills as it refills any.
///
/// A request the lease covers is answered here: allowed, with `remaining` the store's as of the
/// lease plus the lease's unspent tokens, and the store's `resetAfter` as of the lease. The
/// wrapped limiter's listener hears the store calls (a lease as one call of its cost), not the
/// requests answered here. When the store's last answer left too few tokens for a lease, the
/// request goes to the store for its own cost alone, as without leasing.
///
/// Thread safety: thread-safe; the leases are guarded by one mutex, held for no I/O.
template <class L>
class LeasedLimiter {
public:
    using Model = typename L::ModelType;
    static_assert(Model::kBucket && RefundableModel<Model>,
                  "ratelimit: leases are for the buckets (TokenBucket, LeakyBucket): a window's "
                  "tokens do not come back as time passes");

    /// Wraps `limiter` (a copy shares its storage). Throws: `std::invalid_argument` naming an
    /// option outside its range. Does no I/O.
    explicit LeasedLimiter(L limiter, LeaseOptions options = {})
        : limiter_(std::move(limiter)), options_(checked(std::move(options))) {}

    /// `L::tryAcquire`, from the key's lease when it covers `cost`.
    /// Throws: as `L::tryAcquire`.
    Decision tryAcquire(std::string_view key, std::int64_t cost = 1) {
        if (cost <= 0 || options_.tokens == 1) {
            return limiter_.tryAcquire(key, cost);
        }
        std::int64_t unspent = 0;
        bool leaseWorthTaking = true;
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            const auto found = leases_.find(key);
            if (found != leases_.end()) {
                Lease& lease = found->second;
                if (now() < lease.expires && lease.tokens >= cost) {
                    lease.tokens -= cost;
                    return fromLease(lease);
                }
                unspent = lease.tokens;
                leaseWorthTaking = lease.storeRemaining >= cost + options_.tokens - 1;
                leases_.erase(found);
            }
        }
        if (unspent > 0) {
            (void)limiter_.refund(key, unspent);
        }
        return leaseWorthTaking ? take(key, cost) : remembered(key, limiter_.tryAcquire(key, cost));
    }

    /// `L::peek`: the store's view, leases taken by any host already spent.
    Decision peek(std::string_view key, std::int64_t cost = 1) { return limiter_.peek(key, cost); }

    /// Gives this host's lease on `key` back to the store and resets the key there.
    void reset(std::string_view key) {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            leases_.erase(std::string(key));
        }
        limiter_.reset(key);
    }

    /// Gives every unspent leased token back to the store. Throws: as `L::refund`.
    void returnLeases() {
        std::unordered_map<std::string, Lease, Hash, std::equal_to<>> taken;
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            taken.swap(leases_);
        }
        for (const auto& [key, lease] : taken) {
            if (lease.tokens > 0) {
                (void)limiter_.refund(key, lease.tokens);
            }
        }
    }

    /// The wrapped limiter.
    [[nodiscard]] L& limiter() noexcept { return limiter_; }
    [[nodiscard]] const LeaseOptions& options() const noexcept { return options_; }

private:
    struct Lease {
        std::int64_t tokens = 0;          // unspent
        std::int64_t storeRemaining = 0;  // the store's remaining when it was taken
        std::chrono::steady_clock::time_point expires{};
        Decision taken{};  // the store's answer that took it
    };

    struct Hash {
        // NOLINTNEXTLINE(readability-identifier-naming): the standard's name for it
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };

    /// Takes `tokens` for a request of `cost`, or failing that asks for `cost` alone.
    Decision take(std::string_view key, std::int64_t cost) {
        const std::int64_t extra = options_.tokens - 1;
        const Decision d = limiter_.tryAcquire(key, cost + extra);
        if (d.degraded) {
            // No lease out of the failure policy: its answer for the request's own cost (the
            // breaker now open, without I/O; a fallback table keeps the lease's tokens spent).
            return limiter_.tryAcquire(key, cost);
        }
        if (!d.allowed) {
            return remembered(key, limiter_.tryAcquire(key, cost));
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        if (leases_.size() >= options_.maxKeys && leases_.find(key) == leases_.end()) {
            dropExpired();
        }
        if (leases_.size() >= options_.maxKeys && leases_.find(key) == leases_.end()) {
            return d;  // no room: the extra tokens stay spent, as by a host that died
        }
        Lease& lease = leases_[std::string(key)];
        const auto expires = now() + options_.lifetime;
        // Another thread may have taken one meanwhile: they spend together until the first
        // of them expires.
        lease.expires = lease.tokens > 0 ? std::min(lease.expires, expires) : expires;
        lease.tokens += extra;
        lease.storeRemaining = d.remaining;
        lease.taken = d;
        return fromLease(lease);
    }

    /// `d`, the store's answer to a request for its own cost, remembered as the key's last so
    /// that the next request leases only when the store had tokens enough.
    Decision remembered(std::string_view key, const Decision& d) {
        if (d.degraded) {
            return d;
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        const auto found = leases_.find(key);
        if (found != leases_.end()) {
            found->second.storeRemaining = d.remaining;
        } else if (leases_.size() < options_.maxKeys) {
            Lease& lease = leases_[std::string(key)];
            lease.storeRemaining = d.remaining;
            lease.expires = now();  // holds no tokens: only the store's figure
        }
        return d;
    }

    [[nodiscard]] static Decision fromLease(const Lease& lease) noexcept {
        Decision d = lease.taken;
        d.allowed = true;
        d.remaining = lease.storeRemaining + lease.tokens;
        d.retryAfter = std::chrono::nanoseconds{0};
        return d;
    }

    /// Forgets expired leases, their unspent tokens left spent (a full table's rare path).
    void dropExpired() {
        const auto t = now();
        std::erase_if(leases_, [t](const auto& entry) { return entry.second.expires <= t; });
    }

    [[nodiscard]] std::chrono::steady_clock::time_point now() const {
        return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
    }

    static LeaseOptions checked(LeaseOptions o) {
        constexpr std::int64_t kMaxTokens = std::int64_t{1} << 20;
        constexpr std::size_t kMaxKeys = std::size_t{1} << 20;
        if (o.tokens < 1 || o.tokens > kMaxTokens) {
            detail::throwInvalidArgument("LeaseOptions.tokens must be in 1..2^20 (got {})",
                                         {o.tokens});
        }
        if (o.lifetime < std::chrono::milliseconds{1} || o.lifetime > std::chrono::hours{1}) {
            detail::throwInvalidArgument("LeaseOptions.lifetime must be in 1ms..1h (got {}ms)",
                                         {o.lifetime.count()});
        }
        if (o.maxKeys < 1 || o.maxKeys > kMaxKeys) {
            detail::throwInvalidArgument("LeaseOptions.maxKeys must be in 1..2^20 (got {})",
                                         {o.maxKeys});
        }
        return o;
    }

    L limiter_;
    LeaseOptions options_;
    std::mutex mutex_;
    std::unordered_map<std::string, Lease, Hash, std::equal_to<>> leases_;  // guarded by mutex_
};

}  // namespace v1
}  // namespace ratelimit
