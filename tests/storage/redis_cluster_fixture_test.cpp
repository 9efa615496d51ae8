// Tests of the Redis Cluster fixture (tests/support/redis_cluster.hpp) itself, so that a cluster
// test that fails points at the library and not at its fixture: the cluster comes up as
// documented, the local hash slot agrees with the server's, a slot migrates in steps with the
// redirections a cluster client has to follow, and a killed master is replaced by its replica.
// Each test starts its own six redis-servers.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include "support/catch.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/redis_test_cluster.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {
namespace {

/// The reply as text for checks: strings and errors as they are, nil as "(nil)".
std::string replyText(const RedisReplyPtr& r) {
    REQUIRE(r != nullptr);
    if (r->type == REDIS_REPLY_NIL) {
        return "(nil)";
    }
    REQUIRE((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
             r->type == REDIS_REPLY_ERROR));
    return {r->str, r->len};
}

/// A connection of the test's own to `node`, which (unlike RedisCluster::run) lets a test see
/// MOVED and ASK.
RedisContextPtr connectTo(const RedisCluster& cluster, std::size_t node) {
    RedisContextPtr c{cluster.server(node).connect()};
    REQUIRE(c != nullptr);
    REQUIRE(c->err == 0);
    return c;
}

std::string redirect(std::string_view kind, std::uint16_t slot, int port) {
    return std::string(kind) + " " + std::to_string(slot) + " 127.0.0.1:" + std::to_string(port);
}

/// Keys whose slots the server computes differently if the hash tag rule is got wrong: tags
/// empty, unclosed, nested, repeated, at either end, and binary bytes, NUL among them.
std::vector<std::string> slotKeys() {
    std::vector<std::string> keys = {
        "",
        "123456789",
        "foo",
        "{",
        "}",
        "{}",
        "}{",
        "{}x",
        "x{}",
        "{}{a}",
        "{a}{b}",
        "a{b}c",
        "a{b",
        "a}b{c}",
        "{{a}}",
        "{a}}",
        "}{a}",
        "{a",
        "user:{42}:profile",
        "user:{42}:limits",
        "rl:{tenant}:key",
        std::string("\0", 1),
        std::string("\0{a}\0", 5),
        std::string("{\0}", 3),
        std::string("x{\0\0}y", 6),
        "{\xff\xfe}x",
        "\xff{}\x80",
    };
    std::mt19937 random(20240917);  // fixed: a failure repeats
    const std::string alphabet = std::string("{}{}ab:\xff\x80\0", 10);
    while (keys.size() < 200) {
        std::string key;
        const std::size_t length = random() % 24;
        for (std::size_t i = 0; i < length; ++i) {
            // Half the bytes from a small alphabet rich in braces, half anything.
            key.push_back(random() % 2 == 0 ? alphabet[random() % alphabet.size()]
                                            : static_cast<char>(random() % 256));
        }
        keys.push_back(key);
    }
    return keys;
}

/// The key as printable text for failure messages.
std::string escaped(std::string_view key) {
    std::string out;
    for (const char ch : key) {
        const auto b = static_cast<unsigned char>(ch);
        if (b >= 0x20 && b < 0x7f) {
            out.push_back(ch);
        } else {
            out += "\\x" + std::string(1, "0123456789abcdef"[b >> 4U]) +
                   std::string(1, "0123456789abcdef"[b & 0xfU]);
        }
    }
    return out;
}

}  // namespace

TEST_CASE("RedisCluster: keySlot is CRC16 (XMODEM) of the hash tag, mod 16384", "[cluster]") {
    // The check value of CRC16/XMODEM and the examples of the cluster specification.
    STATIC_REQUIRE(RedisCluster::keySlot("123456789") == 0x31C3);
    STATIC_REQUIRE(RedisCluster::keySlot("{user1000}.following") ==
                   RedisCluster::keySlot("user1000"));
    STATIC_REQUIRE(RedisCluster::keySlot("foo{}{bar}") != RedisCluster::keySlot("bar"));
    STATIC_REQUIRE(RedisCluster::keySlot("foo{{bar}}zap") == RedisCluster::keySlot("{bar"));
    STATIC_REQUIRE(RedisCluster::keySlot("foo{bar}{zap}") == RedisCluster::keySlot("bar"));
}

TEST_CASE("RedisCluster: three masters and three replicas serve every slot", "[cluster]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    REQUIRE(cluster->size() == 6);
    CHECK(cluster->masters() == std::vector<std::size_t>{0, 1, 2});
    for (std::size_t m = 0; m < 3; ++m) {
        CHECK(cluster->replicasOf(m) == std::vector<std::size_t>{m + 3});
    }
    const auto seeds = cluster->seeds();
    REQUIRE(seeds.size() == 6);
    for (std::size_t n = 0; n < cluster->size(); ++n) {
        CAPTURE(n);
        CHECK(seeds[n].first == "127.0.0.1");
        CHECK(seeds[n].second == cluster->port(n));
        CHECK(cluster->port(n) == cluster->server(n).port());
        CHECK(cluster->nodeId(n) == replyText(cluster->run(n, {"CLUSTER", "MYID"})));
        const std::string info = replyText(cluster->run(n, {"CLUSTER", "INFO"}));
        CHECK_THAT(info, Contains("cluster_state:ok"));
        CHECK_THAT(info, Contains("cluster_slots_ok:16384"));
        CHECK_THAT(info, Contains("cluster_known_nodes:6"));
        CHECK_THAT(info, Contains("cluster_size:3"));
        // While a master is down its slots answer CLUSTERDOWN, reads included (the default),
        // and the other masters' slots go on being served.
        for (const auto& [option, value] : {std::pair{"cluster-allow-reads-when-down", "no"},
                                            std::pair{"cluster-require-full-coverage", "no"}}) {
            CAPTURE(option);
            const RedisReplyPtr r = cluster->run(n, {"CONFIG", "GET", option});
            REQUIRE(r->type == REDIS_REPLY_ARRAY);
            REQUIRE(r->elements == 2);
            CHECK(std::string(r->element[1]->str, r->element[1]->len) == value);
        }
    }
    // The slots at the ranges' edges belong to the masters of the documented layout.
    for (const int s : {0, 1, 5460, 5461, 10922, 10923, 16383}) {
        const auto slot = static_cast<std::uint16_t>(s);
        CAPTURE(slot);
        CHECK(cluster->masterOf(slot) == (slot <= 5460 ? 0U : slot <= 10922 ? 1U : 2U));
    }

    // The local slot agrees with the server's for every key.
    for (const std::string& key : slotKeys()) {
        CAPTURE(escaped(key));
        const RedisReplyPtr r = cluster->run(0, {"CLUSTER", "KEYSLOT", key});
        REQUIRE(r->type == REDIS_REPLY_INTEGER);
        CHECK(RedisCluster::keySlot(key) == r->integer);
        // And the master that keySlot points at serves the key without redirecting.
        const RedisContextPtr c =
            connectTo(*cluster, cluster->masterOf(RedisCluster::keySlot(key)));
        CHECK(replyText(RedisReplyPtr{command(c.get(), {"GET", key})}) == "(nil)");
    }
}

TEST_CASE("RedisCluster: a slot migrates in steps, with ASK in between and MOVED after",
          "[cluster]") {
    const auto cluster = startCluster();
    if (!cluster) {
        return;
    }
    const std::string key = "fixture:{migrate}";
    const std::uint16_t slot = RedisCluster::keySlot(key);
    const std::size_t from = cluster->masterOf(slot);
    const std::size_t to = (from + 1) % 3;
    // More keys of the slot than one GETKEYSINSLOT batch (100), so that migrateKeys loops.
    std::vector<std::string> others;
    for (int i = 0; i < 150; ++i) {
        others.push_back("fixture:{migrate}:" + std::to_string(i));
        cluster->run(from, {"SET", others.back(), std::to_string(i)});
    }
    CHECK(replyText(cluster->run(from, {"SET", key, "value"})) == "OK");
    const RedisContextPtr onFrom = connectTo(*cluster, from);
    const RedisContextPtr onTo = connectTo(*cluster, to);
    CHECK(replyText(RedisReplyPtr{command(onTo.get(), {"GET", key})}) ==
          redirect("MOVED", slot, cluster->port(from)));

    cluster->beginMigration(slot, from, to);
    // Keys not moved yet are still served where they were.
    CHECK(replyText(RedisReplyPtr{command(onFrom.get(), {"GET", key})}) == "value");
    // Ending the migration now would lose the keys: the fixture refuses, changing nothing.
    REQUIRE_THROWS_WITH(cluster->endMigration(slot, to), Contains("151 keys not migrated"));

    CHECK(cluster->migrateKeys(slot, from, to) == others.size() + 1);
    CHECK(cluster->run(from, {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)})->integer == 0);
    // The source sends the client on with ASK; the target serves it only after ASKING.
    CHECK(replyText(RedisReplyPtr{command(onFrom.get(), {"GET", key})}) ==
          redirect("ASK", slot, cluster->port(to)));
    CHECK(replyText(RedisReplyPtr{command(onTo.get(), {"GET", key})}) ==
          redirect("MOVED", slot, cluster->port(from)));
    CHECK(replyText(RedisReplyPtr{command(onTo.get(), {"ASKING"})}) == "OK");
    CHECK(replyText(RedisReplyPtr{command(onTo.get(), {"GET", key})}) == "value");

    cluster->endMigration(slot, to);
    CHECK(cluster->masterOf(slot) == to);
    CHECK(replyText(RedisReplyPtr{command(onFrom.get(), {"GET", key})}) ==
          redirect("MOVED", slot, cluster->port(to)));
    CHECK(replyText(RedisReplyPtr{command(onTo.get(), {"GET", key})}) == "value");
    CHECK(replyText(RedisReplyPtr{command(onTo.get(), {"GET", others.back()})}) == "149");
    CHECK(cluster->run(to, {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)})->integer == 151);
    // The neighbouring slots stayed where they were.
    const std::uint16_t neighbour = slot == 0 ? 1 : static_cast<std::uint16_t>(slot - 1);
    CHECK(cluster->masterOf(neighbour) == from);
}

TEST_CASE("RedisCluster: a killed master is replaced by its replica", "[cluster]") {
    const auto cluster = startCluster({.nodeTimeout = 500ms});
    if (!cluster) {
        return;
    }
    const std::string key = "fixture:{failover}";
    const std::uint16_t slot = RedisCluster::keySlot(key);
    const std::size_t master = cluster->masterOf(slot);
    const std::vector<std::size_t> replicas = cluster->replicasOf(master);
    REQUIRE(replicas.size() == 1);
    CHECK(replyText(cluster->run(master, {"SET", key, "value"})) == "OK");

    cluster->kill(master);
    CHECK_FALSE(cluster->alive(master));
    const std::size_t promoted = cluster->waitForFailover(slot, 20s);
    CHECK(promoted == replicas.front());
    CHECK(cluster->masterOf(slot) == promoted);
    const std::vector<std::size_t> masters = cluster->masters();
    CHECK(masters.size() == 3);
    CHECK(std::find(masters.begin(), masters.end(), master) == masters.end());

    // The new master serves the slot. The write may or may not have reached the replica
    // before the kill (replication is asynchronous): no check on the value.
    const RedisContextPtr c = connectTo(*cluster, promoted);
    const RedisReplyPtr got{command(c.get(), {"GET", key})};
    REQUIRE(got != nullptr);
    CHECK(got->type != REDIS_REPLY_ERROR);
    CHECK(replyText(RedisReplyPtr{command(c.get(), {"SET", key, "after"})}) == "OK");
    CHECK(replyText(RedisReplyPtr{command(c.get(), {"GET", key})}) == "after");
    // The other masters go on serving their slots.
    for (const std::size_t m : masters) {
        CHECK(replyText(cluster->run(m, {"CLUSTER", "INFO"})).find("cluster_state:ok") !=
              std::string::npos);
    }
}

}  // namespace ratelimit_test
