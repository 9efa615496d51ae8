#pragma once

// Local token leases over a shared bucket: a host takes several tokens from the store in one
// call and answers the next requests on the key from them, without a round trip
// (docs/semantics.md, "Token leases").

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
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
    /// Renewal: when a request leaves fewer than this many tokens unspent, its thread takes the
    /// next lease of `tokens` after answering it, while the host's other threads go on spending
    /// what is left, so a hot key's threads need not wait for a take. 0 … tokens − 1; 0 takes a
    /// lease only when one has run out. Default (empty): tokens / 4. It adds to the
    /// over-admission bound (docs/semantics.md, "Token leases").
    std::optional<std::int64_t> renewBelow{};
    /// Keys holding a lease at once in this host, 1 … 2^20; a key beyond them goes to the store
    /// for each request until an expired lease makes room. Default 1024.
    std::size_t maxKeys = 1024;
    /// For tests: the clock that times a lease's lifetime. Default (empty):
    /// `std::chrono::steady_clock`.
    std::function<std::chrono::steady_clock::time_point()> clock{};
};
// NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)

/// A bucket limiter (a token or leaky bucket, over any storage; meant for Redis) whose hot keys
/// are answered from local leases: a request the key's lease cannot cover takes `tokens` at once
/// from the store, its own cost among them, and the following requests spend the rest here,
/// without a round trip, until they run out or the lease's `lifetime` passes. Then what is left
/// goes back to the store (a refund) and the next request takes a new lease. A request that
/// leaves fewer than `renewBelow` unspent renews: its thread takes `tokens` more after its own
/// answer is settled, while the others spend what is left. One thread of a host takes a key's
/// lease at a time; the others wait for it (one store call's time) only when nothing is left.
///
/// Exactness: leased tokens are spent in the store when they are taken, so the store never
/// admits more than its bucket allows. What a lease changes is when they are spent: a host
/// spending leased tokens after the bucket refilled admits beyond what the exact bucket would,
/// by at most the tokens it holds unspent, `tokens − 1 + renewBelow`, so across hosts by at
/// most `hosts × (tokens − 1 + renewBelow)` over any span of time. With `tokens == 1` nothing is
/// leased and the decisions are the limiter's own.
///
/// A request the lease covers is answered here: allowed, with `remaining` the store's as of the
/// lease plus the lease's unspent tokens, and the store's `resetAfter` as of the lease. The
/// wrapped limiter's listener hears the store calls (a lease as one call of its cost), not the
/// requests answered here. When the store's last answer left too few tokens for a lease, the
/// request goes to the store for its own cost alone, as without leasing.
///
/// Thread safety: thread-safe; the leases are guarded by one mutex, held for no I/O. A thread
/// waits for a take only while another thread's store call for that key is under way.
template <class L>
class LeasedLimiter {
public:
    using Model = typename L::ModelType;
    static_assert(std::is_same_v<Model, TokenBucketModel> ||
                      std::is_same_v<Model, LeakyBucketModel>,
                  "ratelimit: leases are for a plain TokenBucket or LeakyBucket: a window's tokens "
                  "do not come back as time passes, and a penalty would count a lease refused "
                  "as a strike");

    /// Costs above this go to the store as they are.
    static constexpr std::int64_t kMaxTokens = std::int64_t{1} << 20;

    /// Wraps `limiter` (a copy shares its storage). Throws: `std::invalid_argument` naming an
    /// option outside its range, or a dry-run limiter (whose leases would spend nothing). Does
    /// no I/O.
    explicit LeasedLimiter(L limiter, LeaseOptions options = {})
        : limiter_(std::move(limiter)), options_(checked(std::move(options))) {
        if (limiter_.options().dryRun) {
            detail::throwInvalidArgument(
                "LimiterOptions.dryRun must be false under a LeasedLimiter: a dry run's leases "
                "would spend nothing");
        }
    }

    /// `L::tryAcquire`, from the key's lease when it covers `cost`.
    /// Throws: as `L::tryAcquire`.
    Decision tryAcquire(std::string_view key, std::int64_t cost = 1) {
        if (cost <= 0 || cost > kMaxTokens || options_.tokens == 1) {
            return limiter_.tryAcquire(key, cost);
        }
        std::int64_t unspent = 0;
        bool takesLease = false;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            auto found = leases_.find(key);
            if (found == leases_.end()) {
                if (!roomForOneMore()) {
                    lock.unlock();
                    return limiter_.tryAcquire(key, cost);
                }
                found = leases_.emplace(std::string(key), Lease{}).first;
            }
            Lease& lease = found->second;
            const bool live = now() < lease.expires;
            if (live && lease.tokens >= cost) {
                lease.tokens -= cost;
                const Decision d = fromLease(lease);
                if (renewsNow(lease)) {
                    lease.taking = true;
                    lock.unlock();
                    renew(key);
                }
                return d;
            }
            if (lease.taking) {
                taken_.wait(lock);  // another thread takes the key's lease: one store call
                continue;
            }
            takesLease = !lease.storeKnown || lease.storeRemaining >= cost + options_.tokens - 1;
            if (takesLease || !live) {
                unspent = std::exchange(lease.tokens, 0);  // back to the store
            }
            lease.taking = takesLease;
            break;
        }
        lock.unlock();
        if (unspent > 0) {
            refundQuietly(key, unspent);
        }
        if (!takesLease) {
            return remembered(key, limiter_.tryAcquire(key, cost));
        }
        try {
            return take(key, cost);
        } catch (...) {
            settle(key, nullptr);
            throw;
        }
    }

    /// `L::peek`: the store's view, leases taken by any host already spent.
    Decision peek(std::string_view key, std::int64_t cost = 1) { return limiter_.peek(key, cost); }

    /// Drops this host's lease on `key` and resets the key in the store.
    void reset(std::string_view key) {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            if (const auto found = leases_.find(key); found != leases_.end()) {
                found->second.tokens = 0;
                found->second.storeKnown = false;
            }
        }
        limiter_.reset(key);
    }

    /// Gives every unspent leased token back to the store (at shutdown). Throws: the first
    /// refund's exception, after every other refund was tried.
    void returnLeases() {
        std::vector<std::pair<std::string, std::int64_t>> unspent;
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            for (auto& [key, lease] : leases_) {
                if (lease.tokens > 0) {
                    unspent.emplace_back(key, std::exchange(lease.tokens, 0));
                }
            }
        }
        std::exception_ptr first;
        for (const auto& [key, tokens] : unspent) {
            try {
                (void)limiter_.refund(key, tokens);
            } catch (...) {
                first = first ? first : std::current_exception();
            }
        }
        if (first) {
            std::rethrow_exception(first);
        }
    }

    /// The wrapped limiter.
    [[nodiscard]] L& limiter() noexcept { return limiter_; }
    /// The options, `renewBelow` resolved.
    [[nodiscard]] const LeaseOptions& options() const noexcept { return options_; }

private:
    struct Lease {
        std::int64_t tokens = 0;  // unspent
        std::chrono::steady_clock::time_point expires{};
        std::int64_t storeRemaining = 0;  // the store's last answer for the key
        bool storeKnown = false;
        bool taking = false;  // a thread is taking a new lease
        Decision taken{};     // the store's answer that took the lease
    };

    struct Hash {
        // NOLINTNEXTLINE(readability-identifier-naming): the standard's name for it
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };

    /// Takes `tokens` for a request of `cost` (this thread alone takes the key's lease), or,
    /// when the store cannot spare them, asks for `cost` alone.
    Decision take(std::string_view key, std::int64_t cost) {
        const std::int64_t extra = options_.tokens - 1;
        const Decision d = limiter_.tryAcquire(key, cost + extra);
        if (d.degraded) {
            // No lease out of the failure policy: its answer for the request's own cost (the
            // breaker now open, without I/O; a fallback table keeps the lease's tokens spent).
            settle(key, nullptr);
            return limiter_.tryAcquire(key, cost);
        }
        if (!d.allowed) {
            const Decision own = limiter_.tryAcquire(key, cost);
            settle(key, own.degraded ? nullptr : &own);
            return own;
        }
        return settle(key, &d, extra);
    }

    /// Whether a request that just spent from the live `lease` takes the next one: it left fewer
    /// than `renewBelow`, no thread takes one already, and the store's last answer had room.
    [[nodiscard]] bool renewsNow(const Lease& lease) const noexcept {
        return lease.tokens < *options_.renewBelow && !lease.taking &&
               (!lease.storeKnown || lease.storeRemaining >= options_.tokens);
    }

    /// Takes `tokens` more for the key's live lease (this thread alone takes it). Its request
    /// was answered from the lease already, so nothing here fails it: a store that fails or
    /// refuses adds nothing, and the next request that finds the lease spent asks again.
    void renew(std::string_view key) noexcept {
        try {
            const Decision d = limiter_.tryAcquire(key, options_.tokens);
            const bool granted = d.allowed && !d.degraded;
            (void)settle(key, d.degraded ? nullptr : &d, granted ? options_.tokens : 0);
        } catch (...) {
            (void)settle(key, nullptr);
        }
    }

    /// Ends a take: the store's answer `d` (null: none to keep) and the `tokens` it added to the
    /// lease.
    Decision settle(std::string_view key, const Decision* d, std::int64_t tokens = 0) {
        const std::lock_guard<std::mutex> lock(mutex_);
        auto found = leases_.find(key);
        if (found == leases_.end()) {  // dropped meanwhile (a full table's sweep cannot: taking)
            found = leases_.emplace(std::string(key), Lease{}).first;
        }
        Lease& lease = found->second;
        lease.taking = false;
        taken_.notify_all();
        if (d == nullptr) {
            return Decision{};
        }
        lease.storeRemaining = d->remaining;
        lease.storeKnown = true;
        if (tokens > 0) {
            lease.tokens += tokens;
            lease.expires = now() + options_.lifetime;
            lease.taken = *d;
            return fromLease(lease);
        }
        return *d;
    }

    /// `d`, the store's answer to a request for its own cost, kept as the key's last figure so
    /// that the next request leases only when the store had tokens enough.
    Decision remembered(std::string_view key, const Decision& d) {
        if (!d.degraded) {
            const std::lock_guard<std::mutex> lock(mutex_);
            if (const auto found = leases_.find(key); found != leases_.end()) {
                found->second.storeRemaining = d.remaining;
                found->second.storeKnown = true;
            }
        }
        return d;
    }

    /// Gives `tokens` back; a refund the store fails leaves them spent, which only refuses
    /// sooner.
    void refundQuietly(std::string_view key, std::int64_t tokens) noexcept {
        try {
            (void)limiter_.refund(key, tokens);
        } catch (...) {  // NOLINT(bugprone-empty-catch): documented: the tokens stay spent
        }
    }

    [[nodiscard]] static Decision fromLease(const Lease& lease) noexcept {
        Decision d = lease.taken;
        d.allowed = true;
        d.remaining = lease.storeRemaining + lease.tokens;
        d.retryAfter = std::chrono::nanoseconds{0};
        d.wouldRefuse = false;
        d.penaltyStarted = false;
        return d;
    }

    /// Whether one more key fits, after dropping the expired leases (their unspent tokens stay
    /// spent; at most once per `lifetime`, so a table full of live leases costs no scan per call).
    /// Lock held.
    bool roomForOneMore() {
        if (leases_.size() < options_.maxKeys) {
            return true;
        }
        const auto t = now();
        if (t < nextSweep_) {
            return false;
        }
        nextSweep_ = t + options_.lifetime;
        std::erase_if(leases_, [t](const auto& entry) {
            const Lease& l = entry.second;
            return !l.taking && l.expires <= t;  // what it left unspent stays spent
        });
        return leases_.size() < options_.maxKeys;
    }

    [[nodiscard]] std::chrono::steady_clock::time_point now() const {
        return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
    }

    static LeaseOptions checked(LeaseOptions o) {
        constexpr std::size_t kMaxKeys = std::size_t{1} << 20;
        if (o.tokens < 1 || o.tokens > kMaxTokens) {
            detail::throwInvalidArgument("LeaseOptions.tokens must be in 1..2^20 (got {})",
                                         {o.tokens});
        }
        o.renewBelow = o.renewBelow.value_or(o.tokens / 4);
        if (*o.renewBelow < 0 || *o.renewBelow >= o.tokens) {
            detail::throwInvalidArgument(
                "LeaseOptions.renewBelow must be in 0..tokens-1 (got {}, tokens {})",
                {*o.renewBelow, o.tokens});
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
    std::condition_variable taken_;                                         // a take ended
    std::unordered_map<std::string, Lease, Hash, std::equal_to<>> leases_;  // guarded by mutex_
    std::chrono::steady_clock::time_point nextSweep_{};                     // guarded by mutex_
};

}  // namespace v1
}  // namespace ratelimit
