#pragma once

// Local token leases over a shared bucket: a host takes several tokens from the store in one
// call and answers the next requests on the key from them, without a round trip
// (docs/semantics.md, "Token leases").

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
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
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/lease_call.hpp>
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
    /// How long a lease lives. Its host answers from it for the first half, then gives back
    /// what it left unspent, at its next request; a store with a lease ledger (Redis) takes back
    /// by itself a lease its host has not settled when its lifetime ends, so a host that dies
    /// leaks nothing past it. Default 1 s; 1 ms … 1 h.
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
/// without a round trip, until they run out or half the lease's `lifetime` passes. Then what is
/// left goes back to the store, at the host's next request on any key, and a request on the key
/// takes a new lease. In Redis, each leased key's ledger records what each host may hold, and
/// gives back a lease its host has not settled when its lifetime ends (a host that died). A
/// request that leaves fewer than `renewBelow` unspent renews: its thread takes `tokens` more
/// after its own answer is settled, while the others spend what is left. One thread of a host
/// takes a key's lease at a time; the others wait for it (one store call's time) only when
/// nothing is left.
///
/// Exactness: leased tokens are spent in the store when they are taken, so the store never
/// admits more than its bucket allows. What a lease changes is when they are spent: a host
/// spending leased tokens after the bucket refilled admits beyond what the exact bucket would,
/// by at most the tokens it holds unspent, `tokens − 1 + renewBelow`, so across hosts by at
/// most `hosts × (tokens − 1 + renewBelow)` over any span of time; a lease the store takes back
/// whole adds what was spent of it, at most `tokens − 1 + renewBelow` (docs/semantics.md,
/// "Token leases"). With `tokens == 1` nothing is leased and the decisions are the limiter's own.
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

    /// Wraps `limiter` (a copy shares its storage) and draws this host's name in the store's
    /// lease ledgers. Throws: `std::invalid_argument` naming an option outside its range, or a
    /// dry-run limiter (whose leases would spend nothing). Does no store I/O.
    explicit LeasedLimiter(L limiter, LeaseOptions options = {})
        : limiter_(std::move(limiter)), options_(checked(std::move(options))) {
        if (limiter_.options().dryRun) {
            detail::throwInvalidArgument(
                "LimiterOptions.dryRun must be false under a LeasedLimiter: a dry run's leases "
                "would spend nothing");
        }
    }

    /// `L::tryAcquire`, from the key's lease when it covers `cost`. Before it, a request
    /// settles the lease of this host that ended first, when one on another key ended
    /// unsettled: one store call that gives back what it left unspent.
    /// Throws: as `L::tryAcquire`.
    Decision tryAcquire(std::string_view key, std::int64_t cost = 1) {
        if (cost <= 0 || cost > kMaxTokens || options_.tokens == 1) {
            return limiter_.tryAcquire(key, cost);
        }
        std::unique_lock<std::mutex> lock(mutex_);
        TimePoint t = now();
        if (anotherLeaseEnded(key, t)) [[unlikely]] {
            settleFirstEnded(lock);
            t = now();
        }
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
            const bool live = t < lease.expires;
            if (live && lease.tokens >= cost) {
                lease.tokens -= cost;
                const Decision d = fromLease(lease);
                if (renewsNow(lease)) {
                    detail::LeaseCall renewal = callFor(lease);
                    renewal.cost = renewal.leased = options_.tokens;
                    renewal.held = lease.tokens;
                    lease.taking = true;
                    lock.unlock();
                    callQuietly(key, renewal);
                }
                return d;
            }
            if (lease.taking) {
                taken_.wait(lock);  // another thread calls the store for the key: one call
                t = now();
                continue;
            }
            const bool takes =
                !lease.storeKnown || lease.storeRemaining >= cost + options_.tokens - 1;
            if (!takes && (live || (lease.tokens == 0 && lease.recorded == 0))) {
                break;  // nothing to give back or to settle: the store, for the cost alone
            }
            // A new lease, or the ended one settled with the request's own cost.
            detail::LeaseCall call = callFor(lease);
            call.returned = std::exchange(lease.tokens, 0);
            call.cost = cost;
            if (takes) {
                call.leased = options_.tokens - 1;
                call.cost += call.leased;
            }
            lease.taking = true;
            lock.unlock();
            return storeCall(key, call, cost);
        }
        lock.unlock();
        return remembered(key, limiter_.tryAcquire(key, cost));
    }

    /// `L::peek`: the store's view, leases taken by any host already spent.
    Decision peek(std::string_view key, std::int64_t cost = 1) { return limiter_.peek(key, cost); }

    /// Drops this host's lease on `key` and resets the key in the store (its lease ledger
    /// included).
    void reset(std::string_view key) {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            if (const auto found = leases_.find(key); found != leases_.end()) {
                found->second.tokens = 0;
                found->second.recorded = 0;
                found->second.storeKnown = false;
            }
        }
        limiter_.reset(key);
    }

    /// Gives every unspent leased token back to the store and settles this host's ledger
    /// entries (at shutdown). Throws: the first store call's exception, after every other
    /// call was tried.
    void returnLeases() {
        std::vector<std::pair<std::string, detail::LeaseCall>> calls;
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            for (auto& [key, lease] : leases_) {
                if (!lease.taking && (lease.tokens > 0 || lease.recorded > 0)) {
                    detail::LeaseCall call = callFor(lease);
                    call.returned = std::exchange(lease.tokens, 0);
                    lease.taking = true;
                    calls.emplace_back(key, call);
                }
            }
        }
        std::exception_ptr first;
        for (const auto& [key, call] : calls) {
            const auto sent = now();
            try {
                const Decision d = exchange(key, call);
                settle(key, call, d.degraded ? nullptr : &d, sent);
            } catch (...) {
                settle(key, call, nullptr, sent);
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
    using TimePoint = std::chrono::steady_clock::time_point;

    struct Lease {
        std::int64_t tokens = 0;  // unspent
        TimePoint expires{};
        std::int64_t recorded = 0;        // what the store's ledger holds for this host
        std::int64_t storeRemaining = 0;  // the store's last answer for the key
        bool storeKnown = false;
        bool taking = false;  // a thread calls the store for the key's lease
        bool queued = false;  // in `ending_`
        Decision taken{};     // the store's answer that took the lease
    };

    struct Hash {
        // NOLINTNEXTLINE(readability-identifier-naming): the standard's name for it
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };

    /// A store call for `lease`: this host, its ledger entry, and how long the store keeps it,
    /// a lifetime. The caller fills in the rest.
    [[nodiscard]] detail::LeaseCall callFor(const Lease& lease) const noexcept {
        detail::LeaseCall call;
        call.host = host_;
        call.recorded = lease.recorded;
        call.life = options_.lifetime;
        return call;
    }

    /// How long a host answers from a lease: half its lifetime, so that it settles a lease
    /// that ended well before the store would take it back whole.
    [[nodiscard]] std::chrono::steady_clock::duration answering() const noexcept {
        return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::nanoseconds(options_.lifetime)) /
               2;
    }

    /// The store's answer to `call` (this thread alone calls for the key), where the storage
    /// keeps a lease ledger (`L::lease`); otherwise the unspent tokens refunded, then the step.
    Decision exchange(std::string_view key, const detail::LeaseCall& call) {
        if constexpr (requires { limiter_.lease(key, call); }) {
            return limiter_.lease(key, call);
        } else {
            if (call.returned > 0) {
                refundQuietly(key, call.returned);
            }
            return call.cost > 0 ? limiter_.tryAcquire(key, call.cost) : Decision{};
        }
    }

    /// Takes a lease, or settles an ended one, in one store call that also spends the request's
    /// `cost`. A store that refuses the lease, or fails, answers the request for its own cost
    /// instead: no lease comes out of a failure policy (a fallback table keeps its tokens spent).
    Decision storeCall(std::string_view key, const detail::LeaseCall& call, std::int64_t cost) {
        const TimePoint sent = now();
        Decision d;
        try {
            d = exchange(key, call);
        } catch (...) {
            settle(key, call, nullptr, sent);
            throw;
        }
        if (d.degraded) {
            settle(key, call, nullptr, sent);
            return call.leased > 0 ? limiter_.tryAcquire(key, cost) : d;
        }
        if (!d.allowed && call.leased > 0) {
            settle(key, call, &d, sent);
            return remembered(key, limiter_.tryAcquire(key, cost));
        }
        return settle(key, call, &d, sent);
    }

    /// Whether a request that just spent from the live `lease` takes the next one: it left fewer
    /// than `renewBelow`, no thread takes one already, and the store's last answer had room.
    [[nodiscard]] bool renewsNow(const Lease& lease) const noexcept {
        return lease.tokens < *options_.renewBelow && !lease.taking &&
               (!lease.storeKnown || lease.storeRemaining >= options_.tokens);
    }

    /// A store call whose request was answered already (a renewal, a settlement): nothing here
    /// fails a request, so a store that fails or refuses adds nothing, and the next request that
    /// finds the lease spent asks again.
    void callQuietly(std::string_view key, const detail::LeaseCall& call) noexcept {
        const TimePoint sent = now();
        try {
            const Decision d = exchange(key, call);
            (void)settle(key, call, d.degraded ? nullptr : &d, sent);
        } catch (...) {
            (void)settle(key, call, nullptr, sent);
        }
    }

    /// Ends this thread's store call `call`, sent at `sent`, with the store's answer `d` (null:
    /// none, the store failed): the lease gains what the call leased when the step admitted,
    /// for half a lifetime from `sent`; the ledger entry's figure follows the call, or, when the
    /// call failed and may or may not have run, the larger of the two (the store then takes
    /// back no less than the host holds).
    Decision settle(std::string_view key, const detail::LeaseCall& call, const Decision* d,
                    TimePoint sent) {
        const std::lock_guard<std::mutex> lock(mutex_);
        auto found = leases_.find(key);
        if (found == leases_.end()) {  // dropped meanwhile (a full table's sweep cannot: taking)
            found = leases_.emplace(std::string(key), Lease{}).first;
        }
        Lease& lease = found->second;
        lease.taking = false;
        taken_.notify_all();
        if (d == nullptr) {
            lease.recorded = std::max(lease.recorded, call.held + call.leased);
            return Decision{};
        }
        const std::int64_t granted = d->allowed && call.cost > 0 ? call.leased : 0;
        lease.recorded = call.held + granted;
        if (call.cost > 0) {
            lease.storeRemaining = d->remaining;
            lease.storeKnown = true;
        }
        if (granted == 0) {
            return *d;
        }
        lease.tokens += granted;
        lease.expires = sent + answering();
        lease.taken = *d;
        if (!lease.queued) {
            ending_.emplace_back(found->first, lease.expires);
            lease.queued = true;
        }
        return fromLease(lease);
    }

    /// Whether the lease that ended first is due for settling and on a key other than `key`
    /// (whose own lease a request on it settles with its own store call). Lock held.
    [[nodiscard]] bool anotherLeaseEnded(std::string_view key, TimePoint t) const {
        return !ending_.empty() && ending_.front().second <= t && ending_.front().first != key;
    }

    /// Settles the lease that ended first (`ending_`, in about the order leases end, all of
    /// them lasting as long): what it left unspent goes back, and the ledger entry goes. Lock
    /// held; the store call runs without it.
    void settleFirstEnded(std::unique_lock<std::mutex>& lock) {
        auto [key, due] = std::move(ending_.front());
        ending_.pop_front();
        const auto found = leases_.find(key);
        if (found == leases_.end()) {
            return;
        }
        Lease& lease = found->second;
        lease.queued = false;
        if (lease.expires > due) {  // renewed since: settled when it ends again
            ending_.emplace_back(std::move(key), lease.expires);
            lease.queued = true;
            return;
        }
        if (lease.taking || (lease.tokens == 0 && lease.recorded == 0)) {
            return;  // a store call settles it, or nothing is left to settle
        }
        detail::LeaseCall call = callFor(lease);
        call.returned = std::exchange(lease.tokens, 0);
        lease.taking = true;
        lock.unlock();
        callQuietly(key, call);
        lock.lock();
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

    /// Whether one more key fits, after dropping the leases that ended and were settled (at most
    /// once per `lifetime`, so a table full of live leases costs no scan per call). Lock held.
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
            return !l.taking && l.expires <= t && l.tokens == 0 && l.recorded == 0;
        });
        return leases_.size() < options_.maxKeys;
    }

    [[nodiscard]] TimePoint now() const {
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

    /// This host's name in the store's lease ledgers: 128 random bits in hex, so that no two
    /// hosts (nor two runs of one) share an entry.
    static std::string randomHostName() {
        constexpr std::string_view kDigits = "0123456789abcdef";
        constexpr int kWords = 4;
        constexpr unsigned kNibble = 4;
        constexpr std::uint32_t kNibbleMask = 0xF;
        constexpr unsigned kWordBits = 32;
        std::random_device device;
        std::string name;
        for (int i = 0; i < kWords; ++i) {
            const std::uint32_t word = device();
            for (unsigned shift = kWordBits; shift > 0;) {
                shift -= kNibble;
                name.push_back(kDigits[(word >> shift) & kNibbleMask]);
            }
        }
        return name;
    }

    L limiter_;
    LeaseOptions options_;
    std::string host_ = randomHostName();
    std::mutex mutex_;
    std::condition_variable taken_;  // a store call for a key's lease ended
    std::unordered_map<std::string, Lease, Hash, std::equal_to<>> leases_;  // guarded by mutex_
    /// The leases still to settle when they end, in the order they end (guarded by mutex_).
    std::deque<std::pair<std::string, TimePoint>> ending_;
    TimePoint nextSweep_{};  // guarded by mutex_
};

}  // namespace v1
}  // namespace ratelimit
