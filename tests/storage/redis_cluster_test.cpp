// Tests of RedisStorage on a Redis Cluster (include/ratelimit/detail/redis_cluster.hpp): key
// slots as the Cluster specification defines them, redirects parsed, options checked, and on a
// real 3-master, 3-replica cluster of the test's own (tests/support/redis_cluster.hpp): the
// worked scenarios on keys of every master decide as in memory, 8 threads in each of 4 processes
// admit exactly the limit, a slot migrated under traffic loses and doubles no check (ASK, then
// MOVED), and a killed master's slots are answered by the failure policy until its replica
// takes over while the other masters' slots never notice; a key's lease ledger shares its slot,
// so a dead host's leases come back on every master. Tagged [cluster].

#include "support/redis_cluster.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <thread>
#include <tuple>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/leasing.hpp>
#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_cluster.hpp"
#include "support/worked_scenarios.hpp"
#include "support/worker_process.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

using ratelimit::RedisNodeAddress;
using ratelimit::StoreEvent;
using ratelimit::detail::clusterSlot;

/// Storage options that reach `cluster` through every node, with the test's key prefix.
ratelimit::RedisStorage::Options clusterOptions(const RedisCluster& cluster,
                                                const std::string& keyPrefix) {
    ratelimit::RedisStorage::Options o;
    for (const auto& [host, port] : cluster.seeds()) {
        o.cluster.push_back(RedisNodeAddress{host, port});
    }
    o.keyPrefix = keyPrefix;
    o.timeout = 5000ms;
    o.clusterRefreshInterval = 20ms;
    return o;
}

}  // namespace

TEST_CASE("Redis Cluster: a key's slot is the one the Cluster specification gives",
          "[redis][cluster]") {
    using ratelimit::detail::crc16;
    STATIC_REQUIRE(crc16("123456789") == 0x31C3);  // the specification's check value
    // Every bracket case the specification lists, against the slot of the bytes hashed.
    CHECK(clusterSlot("{user1000}.following") == clusterSlot("user1000"));
    CHECK(clusterSlot("foo{}{bar}") == crc16("foo{}{bar}") % 16384);
    CHECK(clusterSlot("foo{{bar}}zap") == clusterSlot("{bar"));
    CHECK(clusterSlot("foo{bar}{zap}") == clusterSlot("bar"));
    CHECK(clusterSlot("{}") == crc16("{}") % 16384);
    CHECK(clusterSlot("no tag") == crc16("no tag") % 16384);
    CHECK(clusterSlot("open { only") == crc16("open { only") % 16384);
    // Against the fixture's own spelling of the rule, over binary keys too.
    for (int i = 0; i < 500; ++i) {
        std::string key = "k" + std::to_string(i * 7919);
        key.push_back(static_cast<char>(i % 256));
        if (i % 3 == 0) {
            key.insert(0, "p:{").append("}:").append(std::to_string(i));
        }
        CHECK(clusterSlot(key) == RedisCluster::keySlot(key));
    }
}

TEST_CASE("Redis Cluster: MOVED and ASK replies name a slot and a node", "[redis][cluster]") {
    const ratelimit::RedisStorage::Options o;
    ratelimit::detail::RedisPoolCounters counters;
    const ratelimit::detail::RedisNode asked(o, "node-a.example", 7000, counters);
    using ratelimit::detail::redirectOf;
    const auto moved = redirectOf("MOVED 3999 127.0.0.1:6381", asked);
    REQUIRE(moved);
    CHECK(moved->moved);
    CHECK(moved->slot == 3999);
    CHECK(moved->host == "127.0.0.1");
    CHECK(moved->port == 6381);
    const auto ask = redirectOf("ASK 16383 ::1:7002", asked);  // IPv6: the port after the last ':'
    REQUIRE(ask);
    CHECK_FALSE(ask->moved);
    CHECK(ask->slot == 16383);
    CHECK(ask->host == "::1");
    CHECK(ask->port == 7002);
    const auto unknownHost = redirectOf("MOVED 12 :7005", asked);  // a node that knows no address
    REQUIRE(unknownHost);
    CHECK(unknownHost->host == "node-a.example");
    CHECK(unknownHost->port == 7005);
    for (const std::string_view junk :
         {"MOVED", "MOVED 16384 127.0.0.1:7000", "MOVED 1 127.0.0.1:0", "MOVED 1 127.0.0.1:65536",
          "MOVED x 127.0.0.1:7000", "MOVED 1 127.0.0.1", "ASKING 1 h:1", "ERR MOVED 1 h:1",
          "MOVED -1 h:1", "MOVED 1 h:7000x"}) {
        INFO(junk);
        CHECK_FALSE(redirectOf(junk, asked));
    }
}

namespace {

/// RESP pieces, for the replies of CLUSTER SHARDS and CLUSTER SLOTS spelled out by hand.
std::string bulk(std::string_view text) {
    return "$" + std::to_string(text.size()) + "\r\n" + std::string(text) + "\r\n";
}
std::string integer(long long n) { return ":" + std::to_string(n) + "\r\n"; }
std::string array(const std::vector<std::string>& items) {
    std::string out = "*" + std::to_string(items.size()) + "\r\n";
    for (const std::string& item : items) {
        out += item;
    }
    return out;
}
const std::string kNil = "$-1\r\n";

/// `resp` parsed by hiredis's own reader, as the storage receives it.
ratelimit::detail::ReplyPtr parsed(const std::string& resp) {
    redisReader* reader = redisReaderCreate();
    REQUIRE(reader != nullptr);
    void* reply = nullptr;
    const bool ok = redisReaderFeed(reader, resp.data(), resp.size()) == REDIS_OK &&
                    redisReaderGetReply(reader, &reply) == REDIS_OK;
    redisReaderFree(reader);
    REQUIRE(ok);
    REQUIRE(reply != nullptr);
    return ratelimit::detail::ReplyPtr(static_cast<redisReply*>(reply));
}

/// One node of a CLUSTER SHARDS shard, as Redis 7 lists it.
std::string shardNode(std::string_view endpoint, std::string_view ip, long long port,
                      std::string_view role, std::string_view health) {
    return array({bulk("id"), bulk("07c37dfeb235213a872192d90877d0cd55635b91"), bulk("port"),
                  integer(port), bulk("ip"), bulk(ip), bulk("endpoint"), bulk(endpoint),
                  bulk("role"), bulk(role), bulk("replication-offset"), integer(72156),
                  bulk("health"), bulk(health)});
}

std::string shard(const std::vector<long long>& bounds, const std::vector<std::string>& nodes) {
    std::vector<std::string> slots;
    slots.reserve(bounds.size());
    for (const long long b : bounds) {
        slots.push_back(integer(b));
    }
    return array({bulk("slots"), array(slots), bulk("nodes"), array(nodes)});
}

std::string describe(const std::vector<ratelimit::detail::SlotRange>& ranges) {
    std::string out;
    for (const auto& r : ranges) {
        out += std::to_string(r.first) + "-" + std::to_string(r.last) + "@" + r.host + ":" +
               std::to_string(r.port) + " ";
    }
    return out;
}

}  // namespace

TEST_CASE("Redis Cluster: the slot map is read from CLUSTER SHARDS and CLUSTER SLOTS replies",
          "[redis][cluster]") {
    using ratelimit::detail::shardsRanges;
    using ratelimit::detail::slotsRanges;
    const ratelimit::RedisStorage::Options o;
    ratelimit::detail::RedisPoolCounters counters;
    const ratelimit::detail::RedisNode asked(o, "seed.example", 7000, counters);

    // Redis 7.0: one shard per master; its replica listed beside it; two ranges in one shard.
    const auto two = parsed(
        array({shard({0, 5460, 10923, 10930},
                     {shardNode("10.0.0.1", "10.0.0.1", 7001, "master", "online"),
                      shardNode("10.0.0.4", "10.0.0.4", 7004, "replica", "online")}),
               shard({5461, 10922}, {shardNode("10.0.0.5", "10.0.0.5", 7005, "replica", "online"),
                                     shardNode("?", "10.0.0.2", 7002, "master", "online")})}));
    CHECK(describe(shardsRanges(*two, asked)) ==
          "0-5460@10.0.0.1:7001 10923-10930@10.0.0.1:7001 5461-10922@10.0.0.2:7002 ");

    // A failed master stays listed beside the replica promoted in its place, before or after it.
    for (const bool failedFirst : {true, false}) {
        const std::string failed = shardNode("10.0.0.1", "10.0.0.1", 7001, "master", "failed");
        const std::string promoted = shardNode("10.0.0.4", "10.0.0.4", 7004, "master", "online");
        const auto r = parsed(array({shard({0, 99}, failedFirst ? std::vector{failed, promoted}
                                                                : std::vector{promoted, failed})}));
        INFO("failed master listed first: " << failedFirst);
        CHECK(describe(shardsRanges(*r, asked)) == "0-99@10.0.0.4:7004 ");
    }

    // No address known: the node asked; no master at all, or one without a port: left out.
    const auto unknown = parsed(array(
        {shard({0, 9}, {shardNode("", "", 7001, "master", "online")}),
         shard({10, 19}, {shardNode("10.0.0.5", "10.0.0.5", 7005, "replica", "online")}),
         shard({20, 29}, {array({bulk("ip"), bulk("10.0.0.6"), bulk("role"), bulk("master")})})}));
    CHECK(describe(shardsRanges(*unknown, asked)) == "0-9@seed.example:7001 ");

    // Another shape is no map at all.
    CHECK(shardsRanges(*parsed(array({array({bulk("slots"), integer(3)})})), asked).empty());
    CHECK(shardsRanges(*parsed(shard({0, 16384}, {})), asked).empty());
    CHECK(shardsRanges(*parsed(bulk("OK")), asked).empty());

    // Redis 6: CLUSTER SLOTS, the master first; an empty or nil address is the node asked's,
    // an unknown one ("?") leaves its range out.
    const auto slots = parsed(array(
        {array({integer(0), integer(5460), array({bulk("10.0.0.1"), integer(7001), bulk("id")}),
                array({bulk("10.0.0.4"), integer(7004), bulk("id")})}),
         array({integer(5461), integer(10922), array({bulk(""), integer(7002), bulk("id")})}),
         array({integer(10923), integer(16000), array({kNil, integer(7003), bulk("id")})}),
         array({integer(16001), integer(16383), array({bulk("?"), integer(7009), bulk("id")})})}));
    CHECK(describe(slotsRanges(*slots, asked)) ==
          "0-5460@10.0.0.1:7001 5461-10922@seed.example:7002 10923-16000@seed.example:7003 ");
    CHECK(slotsRanges(
              *parsed(array({array({integer(0), integer(16384), array({bulk("h"), integer(1)})})})),
              asked)
              .empty());
    CHECK(slotsRanges(*parsed(array({array({integer(0), integer(9), array({bulk("h")})})})), asked)
              .empty());
}

TEST_CASE("RedisStorage::Options: a cluster's options are checked at construction",
          "[redis][cluster]") {
    const auto rejects = [](ratelimit::RedisStorage::Options o, const std::string& field) {
        INFO(field);
        try {
            const ratelimit::RedisStorage storage(std::move(o));
            FAIL("accepted");
        } catch (const std::invalid_argument& e) {
            CHECK_THAT(e.what(), Catch::Matchers::Contains(field));
        }
    };
    ratelimit::RedisStorage::Options o;
    o.cluster = {{"127.0.0.1", 7000}, {"127.0.0.1", 7001}};
    CHECK_NOTHROW(ratelimit::RedisStorage(o));  // construction connects to no node

    auto badPort = o;
    badPort.cluster[1].port = 0;
    rejects(badPort, "Options.cluster[1]");
    auto noHost = o;
    noHost.cluster[0].host.clear();
    rejects(noHost, "Options.cluster[0]");
    auto socket = o;
    socket.unixSocket = "/tmp/redis.sock";
    rejects(socket, "Options.unixSocket");
    auto database = o;
    database.database = 2;
    rejects(database, "Options.database");
    auto interval = o;
    interval.clusterRefreshInterval = 0ms;
    rejects(interval, "Options.clusterRefreshInterval");
    interval.clusterRefreshInterval = 2min;
    rejects(interval, "Options.clusterRefreshInterval");
}

namespace {

/// One instant for every participant of a contention test.
constexpr std::int64_t kFrozenUs = 1'726'000'000'123'456;

/// The worked scenarios on `keys` keys at once, each key's Redis key named as `prefix` and the
/// scenario's limiter give it: every decision on the cluster equals memory's, every key admits
/// per batch what the table says, and the keys lie on every master.
template <class Model>
void replayAcrossMasters(RedisCluster& cluster, const RedisStorage& storage,
                         const std::string& prefix, int keys) {
    const std::vector<WorkedScenario> scenarios = workedScenarios(std::chrono::microseconds{1});
    for (std::size_t s = 0; s < scenarios.size(); ++s) {
        const WorkedScenario& scenario = scenarios[s];
        INFO(Model::kName << ": " << scenario.name);
        const std::string name = "scenario-" + std::to_string(s);
        ManualClock clock;
        MemoryLimiter<Model> memory(scenario.limit, MemoryStorage{}, clock, limiterOptions(name));
        RedisLimiter<Model> redis(scenario.limit, storage, clock, limiterOptions(name));
        std::set<std::size_t> masters;
        std::vector<std::vector<int>> admitted(static_cast<std::size_t>(keys));
        for (int k = 0; k < keys; ++k) {
            const std::string key = "client " + std::to_string(k);
            masters.insert(
                cluster.masterOf(RedisCluster::keySlot(redisKeyOf<Model>(prefix, name, key))));
        }
        CHECK(masters.size() == RedisCluster::kMasters);
        for (const Batch& batch : scenario.batches) {
            clock.set(batch.at);
            for (int k = 0; k < keys; ++k) {
                const std::string key = "client " + std::to_string(k);
                int n = 0;
                for (int i = 0; i < batch.requests; ++i) {
                    const Decision m = memory.tryAcquire(key);
                    const Decision r = redis.tryAcquire(key);
                    if (const std::string diff = parity(m, r); !diff.empty()) {
                        FAIL(key << ", request " << i << " at " << batch.at.count()
                                 << "ns: " << diff);
                    }
                    n += r.allowed ? 1 : 0;
                }
                admitted[static_cast<std::size_t>(k)].push_back(n);
            }
        }
        for (const std::vector<int>& a : admitted) {
            CHECK(a == scenario.outcomes.at(algorithmIndex<Model>()).admitted);
        }
    }
}

template <class... Models>
void replayEachAcrossMasters(RedisCluster& cluster, const RedisStorage& storage,
                             const std::string& prefix, std::tuple<Models...>* /*models*/) {
    (replayAcrossMasters<Models>(cluster, storage, prefix, 12), ...);
}

/// A key of `name`'s limiter of `Model` whose slot `master` serves.
template <class Model>
std::string keyOn(RedisCluster& cluster, std::size_t master, const std::string& prefix,
                  const std::string& name) {
    for (int i = 0;; ++i) {
        std::string key = "key " + std::to_string(i);
        if (cluster.masterOf(RedisCluster::keySlot(redisKeyOf<Model>(prefix, name, key))) ==
            master) {
            return key;
        }
    }
}

/// Waits until `done()` holds, polling; false after `timeout`.
template <class Done>
bool eventually(std::chrono::milliseconds timeout, Done done) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= until) {
            return false;
        }
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

}  // namespace

TEST_CASE("RedisStorage on a Cluster: the worked scenarios decide on every master as in memory",
          "[redis][cluster]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    const RedisStorage storage(clusterOptions(*cluster, "rl-cluster"));
    replayEachAcrossMasters(*cluster, storage, "rl-cluster",
                            static_cast<ratelimit::AlgorithmModels*>(nullptr));
    const ratelimit::RedisStats stats = storage.stats();
    INFO(describe(stats));
    CHECK(stats.failures == 0);
    CHECK(stats.slotMapReads >= 1);
    // The map was read before the first check went out, so no check was sent to a wrong node.
    CHECK(stats.movedFollowed == 0);
}

TEMPLATE_TEST_CASE(
    "RedisStorage on a Cluster: 8 threads in each of 4 processes admit the limit "
    "exactly",
    "[redis][cluster][concurrency]", RATELIMIT_TEST_MODELS) {
    REQUIRE_FALSE(std::string_view(kWorker).empty());
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    std::string seeds = "cluster:";
    for (const auto& [host, port] : cluster->seeds()) {
        seeds.append(seeds.back() == ':' ? "" : ",").append(host).append(":");
        seeds.append(std::to_string(port));
    }
    const Limit limit = Limit::perMinute(40).withBurst(27);
    const std::string key = "shared key {with} braces";
    std::vector<std::unique_ptr<WorkerProcess>> workers;
    workers.reserve(4);
    for (int i = 0; i < 4; ++i) {
        workers.push_back(std::make_unique<WorkerProcess>(
            std::vector<std::string>{kWorker, seeds, "rl-cluster", "contended",
                                     std::string(TestType::kName), "40", "60000000", "27",
                                     std::to_string(kFrozenUs), "80", key, "8"},
            cluster->server(0).directory() + "/worker" + std::to_string(i)));
    }
    for (const auto& w : workers) {
        w->go();
    }
    std::int64_t admitted = 0;
    for (const auto& w : workers) {
        const WorkerProcess::Result r = w->wait();
        INFO("worker stderr: " << r.err);
        REQUIRE(WIFEXITED(r.status));
        REQUIRE(WEXITSTATUS(r.status) == 0);
        admitted += std::stoll(r.out);
    }
    CHECK(admitted == capacityOf<TestType>(limit));
    const RedisStorage storage(clusterOptions(*cluster, "rl-cluster"));
    ManualClock clock;
    clock.set(std::chrono::microseconds{kFrozenUs});
    RedisLimiter<TestType> limiter(limit, storage, clock, limiterOptions("contended"));
    CHECK(limiter.peek(key, 0).remaining == 0);
}

TEST_CASE("RedisStorage on a Cluster: a slot migrated under traffic loses and doubles no check",
          "[redis][cluster][concurrency]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    using Model = ratelimit::FixedWindowModel;
    const std::string prefix = "rl-migrate";
    const RedisStorage storage(clusterOptions(*cluster, prefix));
    ManualClock clock;  // frozen: every admission stays counted in one window
    clock.set(std::chrono::microseconds{kFrozenUs});
    constexpr std::int64_t kLimit = 1'000'000;
    const Limit limit = Limit::per(kLimit, 1h);
    RedisLimiter<Model> limiter(limit, storage, clock, limiterOptions("hot"));
    const std::string key = "hot key";
    const std::uint16_t slot = RedisCluster::keySlot(redisKeyOf<Model>(prefix, "hot", key));
    const std::size_t from = cluster->masterOf(slot);
    const std::size_t to = from == 0 ? 1 : 0;

    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> admitted{0};
    std::atomic<std::int64_t> failed{0};
    std::vector<std::thread> traffic;
    traffic.reserve(4);
    for (int t = 0; t < 4; ++t) {
        traffic.emplace_back([&] {
            while (!stop.load()) {
                try {
                    admitted.fetch_add(limiter.tryAcquire(key).allowed ? 1 : 0);
                } catch (const StoreException&) {
                    failed.fetch_add(1);
                }
            }
        });
    }
    const auto requestsGrow = [&](std::uint64_t by) {
        const std::uint64_t start = storage.stats().requests;
        return eventually(10s, [&] { return storage.stats().requests >= start + by; });
    };
    CHECK(requestsGrow(200));
    cluster->beginMigration(slot, from, to);
    CHECK(requestsGrow(200));
    CHECK(cluster->migrateKeys(slot, from, to) >= 1);
    CHECK(eventually(10s, [&] { return storage.stats().askFollowed > 0; }));
    cluster->endMigration(slot, to);
    CHECK(eventually(10s, [&] { return storage.stats().movedFollowed > 0; }));
    CHECK(requestsGrow(200));
    stop = true;
    for (std::thread& t : traffic) {
        t.join();
    }
    const ratelimit::RedisStats stats = storage.stats();
    INFO(describe(stats) << " asks " << stats.askFollowed << " moves " << stats.movedFollowed);
    CHECK(failed.load() == 0);
    CHECK(cluster->masterOf(slot) == to);
    // Every admission is counted once in the new master's window: none lost, none doubled.
    CHECK(kLimit - limiter.peek(key, 0).remaining == admitted.load());
}

TEST_CASE(
    "RedisStorage on a Cluster: a limit set whose keys a migration splits waits out TRYAGAIN, "
    "then follows its slot",
    "[redis][cluster]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    using Set = ratelimit::LimitSet<ratelimit::TokenBucketModel, ratelimit::FixedWindowModel>;
    const std::string prefix = "rl-tryagain";
    const RedisStorage storage(clusterOptions(*cluster, prefix));
    ManualClock clock;
    clock.set(std::chrono::microseconds{kFrozenUs});
    const Limit window = Limit::perHour(100);
    RedisLimiter<Set> limiter(Set::Limits{window.withBurst(100), window}, storage, clock,
                              limiterOptions("split", FailurePolicy::kFailClosed));
    const std::string key = "split key";
    REQUIRE(limiter.tryAcquire(key).allowed);  // both members' keys now on the slot's master
    // The members share one hash tag, so a single model's key of it names their slot.
    const std::uint16_t slot =
        RedisCluster::keySlot(redisKeyOf<ratelimit::TokenBucketModel>(prefix, "split", key));
    const std::size_t from = cluster->masterOf(slot);
    const std::size_t to = from == 0 ? 1 : 0;
    const std::string slotText = std::to_string(slot);
    const auto held = cluster->run(from, {"CLUSTER", "GETKEYSINSLOT", slotText, "10"});
    REQUIRE(held->type == REDIS_REPLY_ARRAY);
    REQUIRE(held->elements == 2);
    cluster->beginMigration(slot, from, to);
    // One member's key moves alone: the set's keys are split between the two masters, and the
    // source answers TRYAGAIN until the other one moves too.
    const std::string toPort = std::to_string(cluster->port(to));
    const std::string first(held->element[0]->str, held->element[0]->len);
    const auto moved = cluster->run(from, {"MIGRATE", "127.0.0.1", toPort, first, "0", "5000"});
    REQUIRE(std::string(moved->str, moved->len) == "OK");

    Decision during;
    std::thread call([&] { during = limiter.tryAcquire(key); });
    const bool retried = eventually(10s, [&] { return storage.stats().tryAgainRetries > 0; });
    CHECK(cluster->migrateKeys(slot, from, to) == 1);
    cluster->endMigration(slot, to);
    call.join();
    REQUIRE(retried);
    CHECK(during.allowed);
    CHECK_FALSE(during.degraded);
    const ratelimit::RedisStats stats = storage.stats();
    INFO(describe(stats) << " retries " << stats.tryAgainRetries);
    CHECK(stats.failures == 0);
    CHECK(stats.movedFollowed + stats.askFollowed > 0);  // then it found the slot's new master
    // Each member counted the two requests once.
    Set::Decisions each;
    (void)limiter.peek(key, 0, each);
    CHECK(each[0].remaining == 98);
    CHECK(each[1].remaining == 98);
}

TEST_CASE(
    "RedisStorage on a Cluster: a killed master's slots answer by the failure policy "
    "until its replica takes over, and the others never notice",
    "[redis][cluster]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    using Model = ratelimit::TokenBucketModel;
    const std::string prefix = "rl-failover";
    auto options = clusterOptions(*cluster, prefix);
    options.timeout = 1000ms;  // generous: six servers elect a master on two loaded cores
    options.breakerBackoff = 20ms;
    options.breakerMaxBackoff = 100ms;
    const RedisStorage storage(options);
    ManualClock clock;
    clock.set(std::chrono::microseconds{kFrozenUs});
    RedisLimiter<Model> limiter(Limit::per(1'000'000, 1h), storage, clock,
                                limiterOptions("failover", FailurePolicy::kFailClosed));
    const std::string lost = keyOn<Model>(*cluster, 0, prefix, "failover");
    const std::string kept = keyOn<Model>(*cluster, 1, prefix, "failover");
    REQUIRE_FALSE(limiter.tryAcquire(lost).degraded);
    REQUIRE_FALSE(limiter.tryAcquire(kept).degraded);

    // A node that takes connections but never answers (a replica of another master) must not
    // hold up the map reads that find the promoted replica.
    cluster->server(4).pause();
    cluster->kill(0);
    bool refused = false;
    bool servedAgain = false;
    std::chrono::nanoseconds slowest{0};
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (!servedAgain && std::chrono::steady_clock::now() < until) {
        const auto started = std::chrono::steady_clock::now();
        const Decision d = limiter.tryAcquire(lost);
        slowest = std::max(slowest, std::chrono::steady_clock::now() - started);
        refused = refused || (d.degraded && !d.allowed);
        servedAgain = !d.degraded;
        const Decision other = limiter.tryAcquire(kept);
        REQUIRE_FALSE(other.degraded);
        REQUIRE(other.allowed);
        std::this_thread::sleep_for(5ms);  // pacing, not timing: the loop polls the failover
    }
    INFO(describe(storage.stats()));
    CHECK(refused);
    CHECK(servedAgain);
    CHECK(slowest < options.timeout + 500ms);  // nothing hangs past its deadline
    cluster->server(4).resume();
    const std::size_t promoted = cluster->waitForFailover(
        RedisCluster::keySlot(redisKeyOf<Model>(prefix, "failover", lost)), 30s);
    CHECK(promoted == 3);  // node 0's replica
    CHECK_FALSE(limiter.tryAcquire(lost).degraded);
}

TEST_CASE(
    "RedisStorage: a standalone storage pointed at a Cluster node fails a MOVED as "
    "kRedirected, heard as failing",
    "[redis][cluster]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    using Model = ratelimit::TokenBucketModel;
    std::vector<StoreEvent> events;
    ratelimit::RedisStorage::Options options;
    options.host = "127.0.0.1";
    options.port = cluster->port(0);
    options.keyPrefix = "rl-standalone";
    options.timeout = 5000ms;
    options.onEvent = [&events](const StoreEvent& e) { events.push_back(e); };
    const RedisStorage storage(options);
    const ManualClock clock;
    RedisLimiter<Model> limiter(Limit::perMinute(10), storage, clock, limiterOptions("moved"));
    const std::string local = keyOn<Model>(*cluster, 0, "rl-standalone", "moved");
    const std::string elsewhere = keyOn<Model>(*cluster, 1, "rl-standalone", "moved");
    CHECK(limiter.tryAcquire(local).allowed);
    try {
        (void)limiter.tryAcquire(elsewhere);
        FAIL("a MOVED reply passed for a decision");
    } catch (const StoreException& e) {
        CHECK(e.code() == StoreError::kRedirected);
        CHECK_THAT(e.what(), Catch::Matchers::Contains("MOVED"));
    }
    REQUIRE(events.size() == 1);
    CHECK(events[0].health == StoreEvent::Health::kFailing);
    CHECK(events[0].error == StoreError::kRedirected);
    const ratelimit::RedisStats stats = storage.stats();
    CHECK(stats.movedFollowed == 0);
    CHECK(stats.failuresOf(StoreError::kRedirected) == 1);
    CHECK(stats.shortCircuited ==
          0);  // a redirect is the server's answer: the breaker stays closed
    CHECK(limiter.tryAcquire(local).allowed);
}

TEST_CASE("LeasedLimiter on a Cluster: a dead host's leases come back on every master",
          "[redis][cluster][leasing]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    using Model = ratelimit::TokenBucketModel;
    using Leased = ratelimit::LeasedLimiter<RedisLimiter<Model>>;
    const std::string prefix = "rl-cluster-lease";
    const RedisStorage storage(clusterOptions(*cluster, prefix));
    ManualClock clock;
    const auto host = [&] {
        ratelimit::LeaseOptions o;
        o.tokens = 10;
        o.lifetime = 4s;
        o.renewBelow = 0;
        o.clock = [&clock] {
            return std::chrono::steady_clock::time_point(
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    clock.now().time_since_epoch()));
        };
        return std::make_unique<Leased>(
            RedisLimiter<Model>(Limit::perHour(1).withBurst(100), storage, clock,
                                limiterOptions("leases")),
            o);
    };
    std::vector<std::string> keys;
    for (const std::size_t m : cluster->masters()) {
        keys.push_back(keyOn<Model>(*cluster, m, prefix, "leases"));
    }
    auto dying = host();
    for (const std::string& key : keys) {
        REQUIRE(dying->tryAcquire(key).allowed);  // a lease of 10 on each master, 9 unspent
    }
    dying.reset();
    clock.advance(4s);  // the lease's lifetime
    const auto other = host();
    for (const std::string& key : keys) {
        INFO(key);
        const Decision d = other->tryAcquire(key);
        CHECK(d.allowed);
        CHECK_FALSE(d.degraded);
        // The ledger, in the bucket's slot, gave back the dead host's 9 before this lease of 10.
        CHECK(other->peek(key, 0).remaining == 100 - 10 + 9 - 10);
    }
    const ratelimit::RedisStats stats = storage.stats();
    INFO(describe(stats));
    CHECK(stats.failures == 0);
}

}  // namespace ratelimit_test
