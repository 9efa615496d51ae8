// Tests of include/ratelimit/storage/redis.hpp: how a storage reaches and authenticates to its
// server: a TCP server, AUTH with a password, an ACL user, and the database it selects. Each
// test starts its own redis-server.

#include <chrono>
#include <string>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

/// A limiter of 2/min over `storage` decides from the server: two calls pass, the third is
/// refused, and no call failed.
template <class L>
void checkServes(L& limiter, const RedisStorage& storage) {
    CHECK(limiter.tryAcquire("k").remaining == 1);
    CHECK(limiter.tryAcquire("k").remaining == 0);
    CHECK_FALSE(limiter.tryAcquire("k").allowed);
    CHECK(storage.stats().failures == 0);
}

}  // namespace

TEST_CASE("RedisStorage: a TCP server", "[redis_storage][redis]") {
    const auto server = startServer({.tcp = true});
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-tcp"));
    ManualClock clock;
    RedisLimiter<ratelimit::SlidingLogModel> limiter(Limit::perSecond(5), storage, clock,
                                                     limiterOptions("tcp"));
    for (int i = 0; i < 5; ++i) {
        const Decision d = limiter.tryAcquire("client");
        CHECK(d.allowed);
        CHECK_FALSE(d.degraded);
        CHECK(d.remaining == 4 - i);
    }
    CHECK_FALSE(limiter.tryAcquire("client").allowed);
    CHECK(storage.stats().connectsOpened == 1);  // one pooled connection, reused
    const RedisContextPtr raw = connectTo(*server);
    CHECK(integerReply(command(raw.get(), {"EXISTS", redisKeyOf<ratelimit::SlidingLogModel>(
                                                         "rl-tcp", "tcp", "client")})) == 1);
}

TEST_CASE("RedisStorage: AUTH with a password", "[redis_storage][redis]") {
    const auto server = startServer({.extraArgs = {"--requirepass", "s3cret pass"}});
    if (!server) {
        return;
    }
    ManualClock clock;
    RedisStorage::Options options = storageOptions(*server, "rl-auth");
    options.password = "s3cret pass";
    const RedisStorage storage(options);
    RedisLimiter<ratelimit::FixedWindowModel> limiter(Limit::perMinute(2), storage, clock,
                                                      limiterOptions("auth"));
    checkServes(limiter, storage);

    // Without the password, or with a wrong one: an authentication error, not a decision.
    options.password = "wrong";
    RedisLimiter<ratelimit::FixedWindowModel> wrong(Limit::perMinute(2), RedisStorage(options),
                                                    clock, limiterOptions("auth"));
    CHECK_THROWS_MATCHES(wrong.tryAcquire("k"), StoreException, StoreErrorIs(StoreError::kAuth));
    // Without a password Redis 7 does not even answer NOAUTH: it refuses the unauthenticated
    // 16-argument EVALSHA with "ERR Protocol error: unauthenticated multibulk length" and
    // closes the connection. That is an authentication failure, and the connection is dead.
    options.password.clear();
    const RedisStorage noPassword(options);
    RedisLimiter<ratelimit::FixedWindowModel> none(Limit::perMinute(2), noPassword, clock,
                                                   limiterOptions("auth"));
    CHECK_THROWS_MATCHES(none.tryAcquire("k"), StoreException, StoreErrorIs(StoreError::kAuth));
    // The next call must not be sent on the connection the server closed (which fails as
    // "closed" or "outcome unknown"): it meets the same refusal, or the open breaker.
    CHECK_THROWS_MATCHES(
        none.tryAcquire("k"), StoreException,
        !StoreErrorIs(StoreError::kClosed) && !StoreErrorIs(StoreError::kOutcomeUnknown));
}

TEST_CASE("RedisStorage: AUTH as an ACL user", "[redis_storage][redis]") {
    const auto server = startServer({.extraArgs = {"--requirepass", "admin-pw"}});
    if (!server) {
        return;
    }
    const RedisContextPtr raw = connectTo(*server);
    ok(command(raw.get(), {"AUTH", "admin-pw"}));
    // A user that may touch only its own keys: proof that the storage authenticates as it.
    ok(command(raw.get(), {"ACL", "SETUSER", "limiter", "on", ">user-pw", "~rlacl:*", "+@all"}));

    ManualClock clock;
    RedisStorage::Options options = storageOptions(*server, "rlacl");
    options.user = "limiter";
    options.password = "user-pw";
    const RedisStorage storage(options);
    RedisLimiter<ratelimit::TokenBucketModel> limiter(Limit::perMinute(2), storage, clock,
                                                      limiterOptions("acl"));
    checkServes(limiter, storage);
    CHECK(integerReply(command(raw.get(), {"EXISTS", redisKeyOf<ratelimit::TokenBucketModel>(
                                                         "rlacl", "acl", "k")})) == 1);

    // The same user outside its key pattern is refused (NOPERM): the ACL user is in force.
    options.keyPrefix = "other";
    RedisLimiter<ratelimit::TokenBucketModel> outside(Limit::perMinute(2), RedisStorage(options),
                                                      clock, limiterOptions("acl"));
    CHECK_THROWS_MATCHES(outside.tryAcquire("k"), StoreException,
                         StoreErrorIs(StoreError::kNoPermission));
    // A wrong password for the user.
    options.keyPrefix = "rlacl";
    options.password = "admin-pw";
    RedisLimiter<ratelimit::TokenBucketModel> wrong(Limit::perMinute(2), RedisStorage(options),
                                                    clock, limiterOptions("acl"));
    CHECK_THROWS_MATCHES(wrong.tryAcquire("k"), StoreException, StoreErrorIs(StoreError::kAuth));
}

TEST_CASE("RedisStorage: the database option selects the database", "[redis_storage][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    ManualClock clock;
    RedisStorage::Options options = storageOptions(*server, "rl-db");
    options.database = 3;
    const RedisStorage storage(options);
    RedisLimiter<ratelimit::LeakyBucketModel> limiter(Limit::perMinute(2), storage, clock,
                                                      limiterOptions("db"));
    CHECK(limiter.tryAcquire("k").remaining == 1);
    CHECK(limiter.tryAcquire("k").remaining == 0);  // the second call, on a pooled connection
    const std::string stored = redisKeyOf<ratelimit::LeakyBucketModel>("rl-db", "db", "k");
    const RedisContextPtr raw = connectTo(*server);
    CHECK(integerReply(command(raw.get(), {"EXISTS", stored})) == 0);
    CHECK(integerReply(command(raw.get(), {"DBSIZE"})) == 0);
    ok(command(raw.get(), {"SELECT", "3"}));
    CHECK(integerReply(command(raw.get(), {"EXISTS", stored})) == 1);
    CHECK(integerReply(command(raw.get(), {"DBSIZE"})) == 1);

    // A database the server does not have is an error of the handshake.
    options.database = 99;
    RedisLimiter<ratelimit::LeakyBucketModel> missing(Limit::perMinute(2), RedisStorage(options),
                                                      clock, limiterOptions("db"));
    CHECK_THROWS_MATCHES(missing.tryAcquire("k"), StoreException, StoreErrorIs(StoreError::kAuth));
}

}  // namespace ratelimit_test
