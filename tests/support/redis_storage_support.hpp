#pragma once

// What the tests of include/ratelimit/storage/redis.hpp share (tests/storage/redis_*_test.cpp
// and tests/algorithms/redis_contract_test.cpp): options pointing a storage at a test's own
// redis-server, Redis keys spelled out independently of the library, raw replies read with
// Catch2 checks, the memory/Redis parity rule, and a matcher for store errors.

#include <arpa/inet.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <netinet/in.h>
#include <sstream>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/siphash.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/store_error.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/packed_state.hpp"
#include "support/redis_server.hpp"

namespace ratelimit_test {

using ratelimit::FailurePolicy;
using ratelimit::RedisStorage;
using ratelimit::StoreError;
using ratelimit::StoreException;

/// The limiter of `Model` over Redis, driven by a ManualClock (times floored to whole µs).
template <class Model>
using RedisLimiter = ratelimit::Limiter<Model, RedisStorage, ratelimit::ManualClock>;

/// The seed of a randomized Redis test: RATELIMIT_TEST_SEED, else a fixed one.
inline std::uint64_t testSeed() {
    // Read while the test case is single-threaded; nothing in the tests calls setenv.
    // NOLINTNEXTLINE(concurrency-mt-unsafe)
    if (const char* s = std::getenv("RATELIMIT_TEST_SEED"); s != nullptr) {
        return std::strtoull(s, nullptr, 10);
    }
    return 20240917;
}

inline RedisContextPtr connectTo(const RedisServer& server) {
    RedisContextPtr c{server.connect()};
    REQUIRE(c != nullptr);
    REQUIRE(c->err == 0);
    return c;
}

/// Storage options for `server`: its socket (or TCP port), a deadline generous enough for a
/// loaded Debug run, and the test's own key prefix.
inline ratelimit::RedisStorage::Options storageOptions(const RedisServer& server,
                                                       const std::string& keyPrefix) {
    ratelimit::RedisStorage::Options o;
    if (server.unixSocket().empty()) {
        o.host = "127.0.0.1";
        o.port = server.port();
    } else {
        o.unixSocket = server.unixSocket();
    }
    o.timeout = std::chrono::milliseconds{5000};
    o.keyPrefix = keyPrefix;
    return o;
}

/// Binds `fd`, a TCP socket, to a free loopback port; returns the port.
inline int bindLoopback(int fd) {
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    auto* address = reinterpret_cast<sockaddr*>(&addr);
    REQUIRE(::bind(fd, address, sizeof addr) == 0);
    REQUIRE(::getsockname(fd, address, &length) == 0);
    return ntohs(addr.sin_port);
}

/// A loopback TCP port nothing listens on (bound, then closed): a connect to it is refused.
inline int closedPort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int port = bindLoopback(fd);
    ::close(fd);
    return port;
}

/// Limiter options: the test's own name, and failures thrown rather than answered by a
/// policy (unless the test names one), so that a store failure can never pass for a decision.
inline ratelimit::LimiterOptions limiterOptions(
    const std::string& name, FailurePolicy policy = ratelimit::FailurePolicy::kThrow) {
    ratelimit::LimiterOptions o;
    o.name = name;
    o.failurePolicy = policy;
    return o;
}

/// A storage's counters, for failure messages (the failures by kind that are not 0).
inline std::string describe(const ratelimit::RedisStats& s) {
    std::string out = "{requests=" + std::to_string(s.requests) +
                      " writes=" + std::to_string(s.writes) +
                      " scriptResends=" + std::to_string(s.scriptResends) +
                      " connectsOpened=" + std::to_string(s.connectsOpened) +
                      " failures=" + std::to_string(s.failures) +
                      " shortCircuited=" + std::to_string(s.shortCircuited);
    for (std::size_t kind = 0; kind < s.failuresByKind.size(); ++kind) {
        if (s.failuresByKind[kind] != 0) {
            out += " " + std::string(ratelimit::toString(static_cast<StoreError>(kind))) + "=" +
                   std::to_string(s.failuresByKind[kind]);
        }
    }
    return out + "}";
}

/// The hash tag of `key`, spelled out independently of RedisStorage::Table::hashTag:
/// `{<len>:<key>}`, or `{#<SipHash-2-4-128 of the key under keyDigestKey, high word first, in
/// hex>}` for a key longer than `maxKeyBytes` (by default the storage's defaults).
inline std::string hashTagOf(std::string_view key, const RedisStorage::Options& o = {}) {
    if (key.size() > o.maxKeyBytes) {
        const ratelimit::detail::Digest128 d =
            ratelimit::detail::SipHash128(o.keyDigestKey[0], o.keyDigestKey[1])(key);
        std::ostringstream hex;
        hex << std::hex << std::setfill('0') << std::setw(16) << d.high << std::setw(16) << d.low;
        return "{#" + hex.str() + "}";
    }
    std::string tag = "{" + std::to_string(key.size()) + ":";
    tag.append(key);
    tag.push_back('}');
    return tag;
}

/// The Redis key of `key` under `Model`, spelled out independently of
/// RedisStorage::Table::redisKey: `<prefix>:<name>:<model>:v<state version><hash tag>`.
template <class Model>
std::string redisKeyOf(const std::string& prefix, const std::string& name, std::string_view key,
                       const RedisStorage::Options& o = {}) {
    return prefix + ":" + name + ":" + std::string(Model::kName) + ":v" +
           std::to_string(Model::kStateVersion) + hashTagOf(key, o);
}

inline std::int64_t integerReply(const RedisReplyPtr& r) {
    REQUIRE(r != nullptr);
    if (r->type == REDIS_REPLY_ERROR) {
        FAIL("Redis error: " << std::string(r->str, r->len));
    }
    REQUIRE(r->type == REDIS_REPLY_INTEGER);
    return r->integer;
}

inline std::string stringReply(const RedisReplyPtr& r) {
    REQUIRE(r != nullptr);
    if (r->type == REDIS_REPLY_ERROR) {
        FAIL("Redis error: " << std::string(r->str, r->len));
    }
    REQUIRE((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS));
    return {r->str, r->len};
}

/// Requires a reply that is not an error.
inline void ok(const RedisReplyPtr& r) {
    REQUIRE(r != nullptr);
    if (r->type == REDIS_REPLY_ERROR) {
        FAIL("Redis error: " << std::string(r->str, r->len));
    }
}

/// Every key of the current database (SCAN, not KEYS).
inline std::vector<std::string> scanAll(redisContext* c) {
    std::vector<std::string> out;
    std::string cursor = "0";
    do {
        const RedisReplyPtr r = command(c, {"SCAN", cursor, "COUNT", "1000"});
        REQUIRE(r != nullptr);
        REQUIRE(r->type == REDIS_REPLY_ARRAY);
        REQUIRE(r->elements == 2);
        cursor.assign(r->element[0]->str, r->element[0]->len);
        const redisReply* keys = r->element[1];
        for (std::size_t i = 0; i < keys->elements; ++i) {
            out.emplace_back(keys->element[i]->str, keys->element[i]->len);
        }
    } while (cursor != "0");
    return out;
}

/// `d` in whole milliseconds, rounded up (as the script's `ceildiv(reset, 1000)` on µs).
inline std::int64_t ceilMs(std::chrono::nanoseconds d) {
    return std::chrono::ceil<std::chrono::milliseconds>(d).count();
}

/// Empty when `redis` equals `memory` as docs/semantics.md promises ("one behaviour, two
/// stores"): equal `allowed`, `remaining`, `limit`, `wouldRefuse` and `penaltyStarted`, durations
/// within 1 µs (kNever on both sides together), not degraded. Otherwise what differs, and both
/// decisions.
inline std::string parity(const ratelimit::Decision& memory, const ratelimit::Decision& redis) {
    using std::chrono::microseconds;
    std::ostringstream out;
    if (memory.allowed != redis.allowed) {
        out << "allowed differs; ";
    }
    if (memory.remaining != redis.remaining) {
        out << "remaining differs; ";
    }
    if (memory.limit != redis.limit) {
        out << "limit differs; ";
    }
    if (memory.wouldRefuse != redis.wouldRefuse) {
        out << "wouldRefuse differs; ";
    }
    if (memory.penaltyStarted != redis.penaltyStarted) {
        out << "penaltyStarted differs; ";
    }
    if (memory.never() != redis.never()) {
        out << "kNever on one side only; ";
    } else if (!memory.never() &&
               std::chrono::abs(memory.retryAfter - redis.retryAfter) > microseconds{1}) {
        out << "retryAfter differs by more than 1us; ";
    }
    if (std::chrono::abs(memory.resetAfter - redis.resetAfter) > microseconds{1}) {
        out << "resetAfter differs by more than 1us; ";
    }
    if (redis.degraded || memory.degraded) {
        out << "degraded; ";
    }
    if (out.tellp() == 0) {
        return {};
    }
    out << "memory " << describe(memory) << ", redis " << describe(redis);
    return out.str();
}

/// Matches a StoreException of the error `code`:
/// `CHECK_THROWS_MATCHES(limiter.tryAcquire("k"), StoreException, StoreErrorIs(kAuth))`.
class StoreErrorIs : public MatcherBase<ratelimit::StoreException> {
public:
    explicit StoreErrorIs(ratelimit::StoreError code) : code_(code) {}

    [[nodiscard]] bool match(const ratelimit::StoreException& e) const override {
        return e.code() == code_;
    }
    [[nodiscard]] std::string describe() const override {
        return std::string("is a store error of kind ") + std::string(ratelimit::toString(code_));
    }

private:
    ratelimit::StoreError code_;
};

}  // namespace ratelimit_test
