// The contract suite over RedisStorage: the checks of contract_cases.hpp, which the memory
// storage passes in contract_test.cpp, run for the five limiters against a redis-server of each
// test's own (tests/support/redis_test_server.hpp; skipped where the machine has none). Redis
// counts whole microseconds, so every time a check uses is a multiple of 1 µs, and the random
// and hammering checks run shorter than in memory. "Works at both ends of the clock's range"
// runs in memory only: Redis times stay below 2^53 µs, far inside the clock's range.
//
// Simulated time against Redis's real-time TTLs: a check moves a ManualClock by hours in a
// microsecond, while Redis drops a key when its TTL (the write's resetAfter, in real
// milliseconds) runs out. A key kept longer than the simulation needs is harmless (every model
// reads a stale state as fresh), one dropped earlier is not. So every write is followed by a
// PERSIST of its key (`Persisted`, below): keys then live as they do in memory. Should the key
// vanish between the write and the PERSIST (a stall of the test process longer than the TTL,
// at least 1 ms), the key's writes are replayed in order on the empty key, which restores
// exactly the state the simulation expects; a key that vanishes without such a stall is a bug.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/redis.hpp>

#include "algorithms/common.hpp"
#include "algorithms/contract.hpp"
#include "support/catch.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"

namespace ratelimit_test {

/// A Redis limiter `L` (ManualClock) whose writes are made permanent at once: after each
/// `tryAcquire` the key's TTL is read and removed in one script. Keeps each key's calls since
/// its last reset, to rebuild a key lost to a stall. Same calls as a limiter.
template <class L>
class Persisted {
public:
    using Model = typename LimiterTraits<L>::Model;

    Persisted(const Limit& limit, const ratelimit::RedisStorage& storage, const Clock& clock,
              const ratelimit::LimiterOptions& options, redisContext* raw, std::string prefix)
        : limiter_(limit, storage, clock, options),
          raw_(raw),
          prefix_(std::move(prefix)),
          name_(options.name) {}

    Decision tryAcquire(std::string_view key, std::int64_t cost = 1) {
        const TimePoint now = limiter_.clock().now();  // the time the limiter reads
        const auto started = std::chrono::steady_clock::now();
        return written(key, cost, now, started, limiter_.tryAcquire(key, cost));
    }
    Decision tryAcquire(std::string_view key, std::int64_t cost, TimePoint t) {
        const auto started = std::chrono::steady_clock::now();
        return written(key, cost, t, started, limiter_.tryAcquire(key, cost, t));
    }
    Decision peek(std::string_view key, std::int64_t cost = 1) { return limiter_.peek(key, cost); }
    Decision peek(std::string_view key, std::int64_t cost, TimePoint t) {
        return limiter_.peek(key, cost, t);
    }
    void reset(std::string_view key) {
        limiter_.reset(key);
        history_.erase(std::string(key));
        persisted_.erase(std::string(key));
    }

private:
    struct Call {
        std::int64_t cost = 0;
        TimePoint at;
    };

    /// Reads the TTL the last call set and removes it, atomically.
    static constexpr const char* kPersist =
        "local t = redis.call('PTTL', KEYS[1])\n"
        "if t >= 0 then redis.call('PERSIST', KEYS[1]) end\n"
        "return t\n";

    /// Records a call that returned `d` and makes what it wrote permanent.
    Decision written(std::string_view key, std::int64_t cost, TimePoint t,
                     std::chrono::steady_clock::time_point started, const Decision& d) {
        std::vector<Call>& calls = history_[std::string(key)];
        calls.push_back({cost, t});
        if (!persist(key, d.allowed && cost > 0, started)) {
            rebuild(key, calls);
        }
        return d;
    }

    /// Makes the key permanent after a call that started at `started`; false when a write was
    /// lost to a stall (the key is gone although the call wrote it or it existed before).
    bool persist(std::string_view key, bool wrote, std::chrono::steady_clock::time_point started) {
        const std::string redisKey = redisKeyOf<Model>(prefix_, name_, key);
        const std::int64_t pttl = integerReply(command(raw_, {"EVAL", kPersist, "1", redisKey}));
        const bool existed = persisted_.contains(std::string(key));
        if (pttl >= 0) {
            persisted_.insert(std::string(key));
            return true;
        }
        if (pttl == -1) {
            if (!existed) {
                FAIL("a Redis key without TTL appeared: " << redisKey);
            }
            return true;
        }
        if (!wrote && !existed) {
            return true;
        }
        const auto elapsed = std::chrono::steady_clock::now() - started;
        if (elapsed < std::chrono::milliseconds{2}) {
            FAIL("the Redis key "
                 << redisKey << " vanished "
                 << std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count()
                 << " µs after a write: no stall explains it");
        }
        persisted_.erase(std::string(key));
        return false;
    }

    /// Replays the key's calls on the empty key, each made permanent as it goes.
    void rebuild(std::string_view key, const std::vector<Call>& calls) {
        for (int attempt = 0; attempt < 10; ++attempt) {
            bool lost = false;
            for (const Call& c : calls) {
                const auto started = std::chrono::steady_clock::now();
                const Decision d = limiter_.tryAcquire(key, c.cost, c.at);
                if (!persist(key, d.allowed && c.cost > 0, started)) {
                    lost = true;
                    break;
                }
            }
            if (!lost) {
                WARN("rebuilt a Redis key lost to a stall of " << calls.size() << " calls");
                return;
            }
            limiter_.reset(key);
        }
        FAIL("a Redis key was lost to stalls ten times in a row");
    }

    L limiter_;
    redisContext* raw_;
    std::string prefix_;
    std::string name_;
    std::map<std::string, std::vector<Call>> history_;
    std::set<std::string> persisted_;
};

/// The Redis storage: one redis-server per test case, a limiter name (so fresh keys) per
/// limiter, microsecond ticks, shorter random and hammering runs than in memory.
template <class L>
class RedisFixture {
public:
    using Limiter = L;
    using Model = typename LimiterTraits<L>::Model;
    static constexpr Nanos kTick{ratelimit::RedisStorage::kNanosPerTick};
    static constexpr int kRandomCalls = 200;
    static constexpr int kHammer = 200;

    RedisFixture() : server_(startServer()) {
        if (server_) {
            storage_.emplace(storageOptions(*server_, kPrefix));
            raw_ = connectTo(*server_);
        }
    }

    [[nodiscard]] bool ready() const { return server_ != nullptr; }

    /// Whether Redis holds `limit` exactly (periods of whole µs, products below 2^53).
    [[nodiscard]] bool accepts(const Limit& limit) const {
        try {
            const L probe(limit, *storage_, Clock{}, limiterOptions("accepts"));
        } catch (const std::invalid_argument&) {
            return false;
        }
        return true;
    }

    Persisted<L> make(const Limit& limit, const Clock& clock,
                      ratelimit::LimiterOptions options = {}) {
        options.name = "contract-" + std::to_string(++limiters_);
        options.failurePolicy = ratelimit::FailurePolicy::kThrow;
        return Persisted<L>(limit, *storage_, clock, options, raw_.get(), kPrefix);
    }

    template <class Check>
    void run(Check check) {
        check(*this);
    }

private:
    static constexpr const char* kPrefix = "rl-contract";
    std::unique_ptr<RedisServer> server_;
    std::optional<ratelimit::RedisStorage> storage_;
    RedisContextPtr raw_;
    int limiters_ = 0;
};

using RedisLimiters = LimitersOver<ratelimit::RedisStorage, Clock>::Type;

}  // namespace ratelimit_test

#define RATELIMIT_TEST_CONTRACT_LIMITERS ratelimit_test::RedisLimiters
#define RATELIMIT_TEST_CONTRACT_FIXTURE ratelimit_test::RedisFixture
#define RATELIMIT_TEST_CONTRACT_STORAGE "[redis]"
#include "algorithms/contract_cases.hpp"
