#pragma once

// A Redis Cluster of the test's own: three masters and one replica of each, six redis-servers
// (tests/support/redis_server.hpp) on loopback TCP, each in its own temporary directory, killed
// and cleaned up by the destructor.
//
//   const auto cluster = ratelimit_test::startCluster();  // redis_test_cluster.hpp; null: skipped
//   if (!cluster) {
//       return;
//   }
//   const std::uint16_t slot = ratelimit_test::RedisCluster::keySlot("rl:{tenant}:key");
//   const std::size_t master = cluster->masterOf(slot);
//   cluster->kill(master);
//   const std::size_t promoted = cluster->waitForFailover(slot, std::chrono::seconds(10));
//
// The layout at start is fixed so that tests can name nodes: nodes 0, 1 and 2 are the masters of
// slots 0-5460, 5461-10922 and 10923-16383 (the split `redis-cli --cluster create` makes), and
// node 3 + i replicates node i. The cluster is built with raw CLUSTER commands (ADDSLOTSRANGE,
// MEET, REPLICATE) rather than with `redis-cli --cluster create`: that one polls with one-second
// sleeps, picks the roles itself and reports through text meant for people. Needs redis-server
// 7.0 or later (CLUSTER ADDSLOTSRANGE, CLUSTER SHARDS).
//
// Every command the fixture sends is checked: an error reply or a lost connection throws
// std::runtime_error naming the node, the command and the reply.
//
// Thread safety: not thread-safe; one test drives one cluster. Copies are not allowed.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include "support/redis_server.hpp"

namespace ratelimit_test {

class RedisCluster {
public:
    /// Nodes in the cluster: three masters and one replica of each.
    static constexpr std::size_t kNodes = 6;
    static constexpr std::size_t kMasters = 3;
    /// Hash slots of every Redis Cluster.
    static constexpr std::size_t kSlots = 16384;

    struct Options {
        /// cluster-node-timeout: how long a node may be unreachable before it is flagged as
        /// failing. A failover after a kill takes about this, plus gossip, plus the replica's
        /// election delay of 0.5-1 s.
        std::chrono::milliseconds nodeTimeout{500};
        /// How long the constructor and `endMigration` wait for every node to agree.
        std::chrono::milliseconds readyTimeout{30000};
        /// Appended to every node's command line. Not for options that change how a client
        /// talks to the nodes (requirepass, TLS): the fixture's own connections would fail.
        std::vector<std::string> extraArgs = {};
    };

    RedisCluster() : RedisCluster(Options{}) {}

    /// Starts the six servers, builds the cluster and waits until every node reports
    /// cluster_state:ok and sees three masters covering all 16384 slots, each with one online
    /// replica. Throws: `RedisUnavailable` when there is no redis-server binary
    /// (std::runtime_error instead when CI=true); std::runtime_error when the cluster does not
    /// come up within `readyTimeout` (with every node's view and log).
    explicit RedisCluster(Options options) : options_(std::move(options)) {
        try {
            for (std::size_t i = 0; i < kNodes; ++i) {
                servers_.push_back(std::make_unique<RedisServer>(RedisServer::Options{
                    .tcp = true, .extraArgs = nodeArguments(), .bind = "127.0.0.1", .port = 0}));
            }
            connections_.resize(kNodes);
            build();
        } catch (...) {
            killAll();
            throw;
        }
    }

    RedisCluster(const RedisCluster&) = delete;
    RedisCluster& operator=(const RedisCluster&) = delete;
    RedisCluster(RedisCluster&&) = delete;
    RedisCluster& operator=(RedisCluster&&) = delete;

    /// SIGKILL rather than RedisServer's SIGTERM: a master shutting down waits up to
    /// shutdown-timeout (10 s) for lagging replicas, and nothing of a test cluster is kept.
    ~RedisCluster() { killAll(); }

    [[nodiscard]] std::size_t size() const noexcept { return servers_.size(); }
    [[nodiscard]] int port(std::size_t node) const { return server(node).port(); }
    [[nodiscard]] RedisServer& server(std::size_t node) { return *servers_.at(node); }
    [[nodiscard]] const RedisServer& server(std::size_t node) const { return *servers_.at(node); }
    /// False once `kill(node)` ran.
    [[nodiscard]] bool alive(std::size_t node) const { return server(node).running(); }

    /// Host and port of every node, killed ones included: what a cluster client is seeded with.
    [[nodiscard]] std::vector<std::pair<std::string, int>> seeds() const {
        std::vector<std::pair<std::string, int>> out;
        for (std::size_t i = 0; i < size(); ++i) {
            out.emplace_back("127.0.0.1", port(i));
        }
        return out;
    }

    /// The node's cluster ID (CLUSTER MYID, read at start; it never changes, and stays known
    /// after a kill).
    [[nodiscard]] const std::string& nodeId(std::size_t node) const { return ids_.at(node); }

    /// The hash slot of `key` as the Redis Cluster specification defines it, computed here and
    /// not asked of a server: CRC16 (XMODEM) mod 16384 of the hash tag, i.e. of the bytes
    /// between the first `{` and the first `}` after it when there is at least one, else of the
    /// whole key.
    [[nodiscard]] static constexpr std::uint16_t keySlot(std::string_view key) noexcept {
        if (const std::size_t open = key.find('{'); open != std::string_view::npos) {
            const std::size_t close = key.find('}', open + 1);
            if (close != std::string_view::npos && close > open + 1) {
                key = key.substr(open + 1, close - open - 1);
            }
        }
        return static_cast<std::uint16_t>(crc16(key) % kSlots);
    }

    /// Sends one command to `node` on the fixture's own connection and returns the reply.
    /// Throws std::runtime_error on an error reply (MOVED and ASK included), a lost connection
    /// or a killed node; tests that expect an error use their own connection
    /// (`server(node).connect()`).
    RedisReplyPtr run(std::size_t node, const std::vector<std::string_view>& args) {
        redisContext* c = connection(node);
        RedisReplyPtr r = command(c, args);
        if (r == nullptr) {
            const std::string error = static_cast<const char*>(c->errstr);
            connections_[node].reset();
            throw failure(node, args, "connection error: " + error);
        }
        if (r->type == REDIS_REPLY_ERROR) {
            throw failure(node, args, text(r.get()));
        }
        return r;
    }

    /// The node that serves `slot` as master: the owner in the first live node's view that
    /// names a live owner (views agree once the constructor, `waitForFailover` and
    /// `endMigration` have returned). Throws when no live node names a live owner, e.g. while
    /// the master is killed and its failover has not happened yet.
    [[nodiscard]] std::size_t masterOf(std::uint16_t slot) {
        checkSlot(slot);
        std::string why;
        for (std::size_t n = 0; n < size(); ++n) {
            if (!alive(n)) {
                continue;
            }
            const std::optional<std::size_t> owner = ownerIn(n, slot);
            if (owner && alive(*owner)) {
                return *owner;
            }
            why += "\n  " + name(n) + ": " +
                   (owner ? "killed " + name(*owner) : std::string("no owner"));
        }
        throw std::runtime_error("ratelimit_test::RedisCluster: no live master of slot " +
                                 std::to_string(slot) + why);
    }

    /// The live nodes that are masters (ROLE), in index order.
    [[nodiscard]] std::vector<std::size_t> masters() {
        std::vector<std::size_t> out;
        for (std::size_t n = 0; n < size(); ++n) {
            if (alive(n) && role(n).at(0) == "master") {
                out.push_back(n);
            }
        }
        return out;
    }

    /// The live nodes that replicate `master` (ROLE), in index order.
    [[nodiscard]] std::vector<std::size_t> replicasOf(std::size_t master) {
        const std::string masterPort = std::to_string(port(master));
        std::vector<std::size_t> out;
        for (std::size_t n = 0; n < size(); ++n) {
            if (!alive(n) || n == master) {
                continue;
            }
            const std::vector<std::string> r = role(n);
            if (r.at(0) == "slave" && r.size() > 2 && r[2] == masterPort) {
                out.push_back(n);
            }
        }
        return out;
    }

    /// SIGKILL: the node dies at once, as in a crash; the fixture skips it from then on.
    void kill(std::size_t node) {
        server(node).kill();
        connections_.at(node).reset();
    }

    /// Waits until every live node's view names the same live master of `slot` and every live
    /// node reports cluster_state:ok; returns that master. After `kill(masterOf(slot))` this is
    /// the promoted replica. Throws std::runtime_error after `timeout`.
    std::size_t waitForFailover(std::uint16_t slot, std::chrono::milliseconds timeout) {
        checkSlot(slot);
        std::size_t promoted = size();
        waitUntil(timeout, "a live master of slot " + std::to_string(slot), [&]() -> std::string {
            std::optional<std::size_t> agreed;
            for (std::size_t n = 0; n < size(); ++n) {
                if (!alive(n)) {
                    continue;
                }
                const std::optional<std::size_t> owner = ownerIn(n, slot);
                if (!owner) {
                    return name(n) + " sees no master of the slot";
                }
                if (!alive(*owner)) {
                    return name(n) + " still sees the killed " + name(*owner) + " as its master";
                }
                if (agreed && *agreed != *owner) {
                    return name(n) + " sees " + name(*owner) + " as its master, others " +
                           name(*agreed);
                }
                agreed = owner;
            }
            if (!agreed) {
                return "no live node";
            }
            if (std::string why = notOk(); !why.empty()) {
                return why;
            }
            promoted = *agreed;
            return {};
        });
        return promoted;
    }

    /// The first step of moving `slot` from master `from` to master `to`: `to` imports it,
    /// `from` migrates it. From here on `from` answers ASK for keys of the slot it no longer
    /// holds, and `to` serves them after ASKING.
    void beginMigration(std::uint16_t slot, std::size_t from, std::size_t to) {
        checkSlot(slot);
        const std::string s = std::to_string(slot);
        run(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", nodeId(from)});
        run(from, {"CLUSTER", "SETSLOT", s, "MIGRATING", nodeId(to)});
    }

    /// The second step: moves every key of `slot` from `from` to `to` (MIGRATE, 100 keys at a
    /// time) and returns how many it moved.
    std::size_t migrateKeys(std::uint16_t slot, std::size_t from, std::size_t to) {
        checkSlot(slot);
        const std::string s = std::to_string(slot);
        const std::string toPort = std::to_string(port(to));
        const auto deadline = std::chrono::steady_clock::now() + options_.readyTimeout;
        std::size_t moved = 0;
        while (true) {
            const RedisReplyPtr keys = run(from, {"CLUSTER", "GETKEYSINSLOT", s, "100"});
            if (keys->type != REDIS_REPLY_ARRAY) {
                throw failure(from, {"CLUSTER", "GETKEYSINSLOT", s, "100"},
                              "not an array: " + text(keys.get()));
            }
            if (keys->elements == 0) {
                return moved;
            }
            if (std::chrono::steady_clock::now() >= deadline) {
                throw failure(from, {"CLUSTER", "GETKEYSINSLOT", s, "100"},
                              "keys still there after " +
                                  std::to_string(options_.readyTimeout.count()) +
                                  " ms of MIGRATE: " + text(keys.get()));
            }
            std::vector<std::string_view> args = {"MIGRATE", "127.0.0.1", toPort, "",
                                                  "0",       "5000",      "KEYS"};
            for (std::size_t i = 0; i < keys->elements; ++i) {
                const redisReply* k = keys->element[i];
                args.emplace_back(k->str, k->len);
            }
            const RedisReplyPtr r = run(from, args);
            // NOKEY: the keys went away (expired) between GETKEYSINSLOT and MIGRATE.
            if (r->type != REDIS_REPLY_STATUS ||
                (text(r.get()) != "OK" && text(r.get()) != "NOKEY")) {
                throw failure(from, args, text(r.get()));
            }
            if (text(r.get()) == "OK") {
                moved += keys->elements;
            }
        }
    }

    /// The last step: assigns `slot` to `to` on every live master (the target first, so that
    /// it bumps its config epoch and wins, then the source, then the others), then waits until
    /// every live node's view names `to` as its master. Throws when the source still holds keys
    /// of the slot (`migrateKeys` first): it would drop them without a word as soon as it heard
    /// of the target's claim, which may come by gossip before its own SETSLOT.
    void endMigration(std::uint16_t slot, std::size_t to) {
        checkSlot(slot);
        const std::string s = std::to_string(slot);
        std::vector<std::size_t> order = {to};
        if (const std::optional<std::size_t> from = ownerIn(to, slot);
            from && *from != to && alive(*from)) {
            const RedisReplyPtr left = run(*from, {"CLUSTER", "COUNTKEYSINSLOT", s});
            if (integer(left.get()) != 0) {
                throw failure(*from, {"CLUSTER", "COUNTKEYSINSLOT", s},
                              text(left.get()) + " keys not migrated to " + name(to));
            }
            order.push_back(*from);
        }
        for (const std::size_t m : masters()) {
            if (std::find(order.begin(), order.end(), m) == order.end()) {
                order.push_back(m);
            }
        }
        for (const std::size_t n : order) {
            run(n, {"CLUSTER", "SETSLOT", s, "NODE", nodeId(to)});
        }
        waitUntil(
            options_.readyTimeout, "every node to see " + name(to) + " own slot " + s,
            [&]() -> std::string {
                for (std::size_t n = 0; n < size(); ++n) {
                    if (!alive(n)) {
                        continue;
                    }
                    if (const std::optional<std::size_t> owner = ownerIn(n, slot); owner != to) {
                        return name(n) + " sees " + (owner ? name(*owner) : std::string("no node"));
                    }
                }
                return {};
            });
    }

private:
    /// One shard of a node's CLUSTER SHARDS view: a master, its slot ranges and its replicas.
    struct Member {
        std::string id;
        std::string role;    // "master" or "replica"
        std::string health;  // "online", "failed" or "loading" (a replica not synced yet)
    };
    struct Shard {
        std::vector<std::pair<long long, long long>> ranges;
        std::vector<Member> members;
    };

    /// The slots each master serves at start: the split `redis-cli --cluster create` makes.
    static constexpr std::array<std::pair<int, int>, kMasters> kRanges = {
        {{0, 5460}, {5461, 10922}, {10923, 16383}}};

    /// CRC16-CCITT as XMODEM computes it (polynomial 0x1021, initial value 0, no reflection):
    /// the variant the Redis Cluster specification names.
    static constexpr std::uint16_t crc16(std::string_view data) noexcept {
        unsigned crc = 0;
        for (const char ch : data) {
            crc ^= static_cast<unsigned>(static_cast<unsigned char>(ch)) << 8U;
            for (int bit = 0; bit < 8; ++bit) {
                crc = (crc & 0x8000U) != 0 ? (crc << 1U) ^ 0x1021U : crc << 1U;
            }
            crc &= 0xffffU;
        }
        return static_cast<std::uint16_t>(crc);
    }

    [[nodiscard]] std::vector<std::string> nodeArguments() const {
        std::vector<std::string> args = {
            "--cluster-enabled", "yes",
            // Relative to --dir, which RedisServer sets to the node's own directory.
            "--cluster-config-file", "nodes.conf", "--cluster-node-timeout",
            std::to_string(options_.nodeTimeout.count()),
            // A replica takes over however long it was cut off from its master: a test that
            // kills a master wants the failover, not a judgement of the replica's data age.
            "--cluster-replica-validity-factor", "0",
            // The other masters keep serving their slots while one is down (failover tests);
            // cluster-allow-reads-when-down stays at its default (no).
            "--cluster-require-full-coverage", "no",
            // Replicas sync at once instead of after the 5 s a master waits by default for
            // more replicas to share one diskless transfer.
            "--repl-diskless-sync-delay", "0",
            // A master pings its replicas every second rather than every 10 s. Until the first
            // ping a replica of a master without writes stays at replication offset 0, which
            // CLUSTER SHARDS reports as "loading", not "online".
            "--repl-ping-replica-period", "1"};
        args.insert(args.end(), options_.extraArgs.begin(), options_.extraArgs.end());
        return args;
    }

    void build() {
        for (std::size_t n = 0; n < size(); ++n) {
            ids_.push_back(text(run(n, {"CLUSTER", "MYID"}).get()));
        }
        // Distinct config epochs before the nodes meet, as redis-cli does: equal epochs would
        // be resolved by the nodes themselves, bumping epochs while the test already runs.
        for (std::size_t n = 0; n < size(); ++n) {
            run(n, {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(n + 1)});
        }
        for (std::size_t m = 0; m < kMasters; ++m) {
            run(m, {"CLUSTER", "ADDSLOTSRANGE", std::to_string(kRanges.at(m).first),
                    std::to_string(kRanges.at(m).second)});
        }
        for (std::size_t n = 1; n < size(); ++n) {
            run(0, {"CLUSTER", "MEET", "127.0.0.1", std::to_string(port(n))});
        }
        // A replica can only be attached to a master it knows by its ID.
        waitUntil(options_.readyTimeout, "the nodes to meet", [&] { return strangers(); });
        for (std::size_t r = kMasters; r < size(); ++r) {
            run(r, {"CLUSTER", "REPLICATE", nodeId(r - kMasters)});
        }
        waitUntil(options_.readyTimeout, "the cluster to be ready", [&] { return notReady(); });
    }

    /// Why some node does not know every other by its ID yet (empty: all do).
    std::string strangers() {
        for (std::size_t n = 0; n < size(); ++n) {
            const std::string nodes = text(run(n, {"CLUSTER", "NODES"}).get());
            std::size_t known = 0;
            std::size_t start = 0;
            while (start < nodes.size()) {
                std::size_t end = nodes.find('\n', start);
                if (end == std::string::npos) {
                    end = nodes.size();
                }
                const std::string line = nodes.substr(start, end - start);
                start = end + 1;
                if (line.empty()) {
                    continue;
                }
                if (!index(line.substr(0, line.find(' '))) ||
                    line.find("handshake") != std::string::npos ||
                    line.find("noaddr") != std::string::npos) {
                    return name(n) + " sees " + line;
                }
                ++known;
            }
            if (known != size()) {
                return name(n) + " knows " + std::to_string(known) + " nodes";
            }
        }
        return {};
    }

    /// Why the cluster is not ready yet (empty: it is).
    std::string notReady() {
        if (std::string why = notOk(); !why.empty()) {
            return why;
        }
        for (std::size_t n = 0; n < size(); ++n) {
            const std::vector<Shard> view = shards(n);
            if (view.size() != kMasters) {
                return name(n) + " sees " + std::to_string(view.size()) + " masters";
            }
            std::vector<bool> covered(kSlots, false);
            std::size_t count = 0;
            for (const Shard& shard : view) {
                std::size_t mastersSeen = 0;
                std::size_t online = 0;
                for (const Member& m : shard.members) {
                    if (!index(m.id)) {
                        return name(n) + " sees an unknown node " + m.id;
                    }
                    if (m.role == "master") {
                        ++mastersSeen;
                        if (m.health != "online") {
                            return name(n) + " sees master " + m.id + " " + m.health;
                        }
                    } else if (m.health == "online") {
                        ++online;
                    }
                }
                if (mastersSeen != 1 || shard.members.size() != 2 || online != 1) {
                    return name(n) + " sees a shard of " + std::to_string(shard.members.size()) +
                           " nodes, " + std::to_string(online) + " replica(s) online";
                }
                for (const auto& [first, last] : shard.ranges) {
                    for (long long s = first; s <= last; ++s) {
                        const auto slot = static_cast<std::size_t>(s);
                        if (slot >= kSlots || covered[slot]) {
                            return name(n) + " sees slot " + std::to_string(s) + " twice";
                        }
                        covered[slot] = true;
                        ++count;
                    }
                }
            }
            if (count != kSlots) {
                return name(n) + " sees " + std::to_string(count) + " slots served";
            }
        }
        return {};
    }

    /// Why some live node does not report cluster_state:ok (empty: all do).
    std::string notOk() {
        for (std::size_t n = 0; n < size(); ++n) {
            if (!alive(n)) {
                continue;
            }
            const std::string info = text(run(n, {"CLUSTER", "INFO"}).get());
            const std::string_view key = "cluster_state:";
            const std::size_t at = info.find(key);
            const std::string state =
                at == std::string::npos
                    ? std::string("?")
                    : info.substr(at + key.size(),
                                  info.find_first_of("\r\n", at) - at - key.size());
            if (state != "ok") {
                return name(n) + " reports cluster_state:" + state;
            }
        }
        return {};
    }

    /// The master of `slot` in `node`'s view (none: no shard serves it, or an unknown ID).
    std::optional<std::size_t> ownerIn(std::size_t node, std::uint16_t slot) {
        for (const Shard& shard : shards(node)) {
            for (const auto& [first, last] : shard.ranges) {
                if (first <= slot && slot <= last) {
                    for (const Member& m : shard.members) {
                        if (m.role == "master") {
                            return index(m.id);
                        }
                    }
                    return std::nullopt;
                }
            }
        }
        return std::nullopt;
    }

    /// `node`'s CLUSTER SHARDS, parsed (RESP2: maps are arrays of key, value).
    std::vector<Shard> shards(std::size_t node) {
        const RedisReplyPtr r = run(node, {"CLUSTER", "SHARDS"});
        const auto malformed = [&](std::string_view what) {
            return failure(node, {"CLUSTER", "SHARDS"},
                           "unexpected reply (" + std::string(what) + "): " + text(r.get()));
        };
        const auto field = [&](const redisReply* map, std::string_view key) {
            if (map->type != REDIS_REPLY_ARRAY) {
                throw malformed("not a map");
            }
            for (std::size_t i = 0; i + 1 < map->elements; i += 2) {
                const redisReply* k = map->element[i];
                if (k->type == REDIS_REPLY_STRING && std::string_view(k->str, k->len) == key) {
                    return static_cast<const redisReply*>(map->element[i + 1]);
                }
            }
            throw malformed(std::string("no ") + std::string(key));
        };
        if (r->type != REDIS_REPLY_ARRAY) {
            throw malformed("not an array");
        }
        std::vector<Shard> out;
        for (std::size_t i = 0; i < r->elements; ++i) {
            Shard shard;
            const redisReply* slots = field(r->element[i], "slots");
            if (slots->type != REDIS_REPLY_ARRAY || slots->elements % 2 != 0) {
                throw malformed("slots");
            }
            for (std::size_t j = 0; j < slots->elements; j += 2) {
                shard.ranges.emplace_back(integer(slots->element[j]),
                                          integer(slots->element[j + 1]));
            }
            const redisReply* nodes = field(r->element[i], "nodes");
            if (nodes->type != REDIS_REPLY_ARRAY) {
                throw malformed("nodes");
            }
            for (std::size_t j = 0; j < nodes->elements; ++j) {
                shard.members.push_back({text(field(nodes->element[j], "id")),
                                         text(field(nodes->element[j], "role")),
                                         text(field(nodes->element[j], "health"))});
            }
            out.push_back(std::move(shard));
        }
        return out;
    }

    /// `node`'s ROLE reply as text: {"master", offset, ...} or {"slave", ip, port, state, ...}.
    std::vector<std::string> role(std::size_t node) {
        const RedisReplyPtr r = run(node, {"ROLE"});
        if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            throw failure(node, {"ROLE"}, "unexpected reply: " + text(r.get()));
        }
        std::vector<std::string> out;
        for (std::size_t i = 0; i < r->elements; ++i) {
            out.push_back(text(r->element[i]));
        }
        return out;
    }

    /// The node with cluster ID `id`, if it is one of ours.
    [[nodiscard]] std::optional<std::size_t> index(std::string_view id) const {
        for (std::size_t n = 0; n < ids_.size(); ++n) {
            if (ids_[n] == id) {
                return n;
            }
        }
        return std::nullopt;
    }

    /// Polls `notReady` (empty string: done) every 10 ms until it is done or `timeout` passed;
    /// then throws with its last answer and every node's view and log.
    template <class NotReady>
    void waitUntil(std::chrono::milliseconds timeout, const std::string& what, NotReady notReady) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (true) {
            std::string why = notReady();
            if (why.empty()) {
                return;
            }
            if (std::chrono::steady_clock::now() >= deadline) {
                std::string message = "ratelimit_test::RedisCluster: waited ";
                message += std::to_string(timeout.count()) + " ms for ";
                message += what;
                message += ": ";
                message += why;
                message += '\n';
                message += describe();
                throw std::runtime_error(message);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }

    /// Every node's CLUSTER NODES and the end of its log, for failure messages.
    std::string describe() {
        std::string out;
        for (std::size_t n = 0; n < size(); ++n) {
            out += "--- " + name(n) + " " + nodeId(n) + "\n";
            if (!alive(n)) {
                out += "(killed)\n";
            } else {
                try {
                    out += text(run(n, {"CLUSTER", "NODES"}).get());
                } catch (const std::runtime_error& e) {
                    out += std::string(e.what()) + "\n";
                }
            }
            const std::string log = server(n).log();
            constexpr std::size_t kTail = 1500;
            out += "log: " + (log.size() > kTail ? "..." + log.substr(log.size() - kTail) : log);
        }
        return out;
    }

    redisContext* connection(std::size_t node) {
        if (!alive(node)) {
            throw std::runtime_error("ratelimit_test::RedisCluster: " + name(node) + " was killed");
        }
        RedisContextPtr& c = connections_.at(node);
        if (c == nullptr || c->err != 0) {
            c.reset(server(node).connect());
            if (c == nullptr || c->err != 0) {
                const std::string error =
                    c == nullptr ? "out of memory" : static_cast<const char*>(c->errstr);
                c.reset();
                throw std::runtime_error("ratelimit_test::RedisCluster: " + name(node) +
                                         ": cannot connect: " + error);
            }
        }
        return c.get();
    }

    void killAll() noexcept {
        connections_.clear();
        for (const std::unique_ptr<RedisServer>& s : servers_) {
            s->kill();
        }
    }

    void checkSlot(std::uint16_t slot) const {
        if (slot >= kSlots) {
            throw std::out_of_range("ratelimit_test::RedisCluster: slot " + std::to_string(slot));
        }
    }

    [[nodiscard]] std::string name(std::size_t node) const {
        return "node " + std::to_string(node) + " (127.0.0.1:" + std::to_string(port(node)) + ")";
    }

    [[nodiscard]] std::runtime_error failure(std::size_t node,
                                             const std::vector<std::string_view>& args,
                                             const std::string& what) const {
        std::string cmd;
        for (const std::string_view a : args) {
            cmd += (cmd.empty() ? "" : " ") + printable(a);
            if (cmd.size() > 300) {
                cmd += " ...";
                break;
            }
        }
        return std::runtime_error("ratelimit_test::RedisCluster: " + name(node) + ": " + cmd +
                                  ": " + what);
    }

    /// `bytes` with everything but printable ASCII as \xHH (keys may be binary).
    static std::string printable(std::string_view bytes) {
        static constexpr std::string_view kHex = "0123456789abcdef";
        std::string out;
        for (const char ch : bytes) {
            const auto b = static_cast<unsigned char>(ch);
            if (b >= 0x20 && b < 0x7f && b != '\\') {
                out.push_back(ch);
            } else {
                out += "\\x";
                out.push_back(kHex[b >> 4U]);
                out.push_back(kHex[b & 0xfU]);
            }
        }
        return out.empty() ? "\"\"" : out;
    }

    static long long integer(const redisReply* r) {
        if (r->type != REDIS_REPLY_INTEGER) {
            throw std::runtime_error("ratelimit_test::RedisCluster: not an integer: " + text(r));
        }
        return r->integer;
    }

    /// A reply as text: strings as they are, integers in decimal, arrays in brackets.
    static std::string text(const redisReply* r) {
        switch (r->type) {
            case REDIS_REPLY_STRING:
            case REDIS_REPLY_STATUS:
            case REDIS_REPLY_ERROR:
                return {r->str, r->len};
            case REDIS_REPLY_INTEGER:
                return std::to_string(r->integer);
            case REDIS_REPLY_NIL:
                return "(nil)";
            case REDIS_REPLY_ARRAY: {
                std::string out = "[";
                for (std::size_t i = 0; i < r->elements; ++i) {
                    out += (i == 0 ? "" : ", ") + printable(text(r->element[i]));
                }
                return out + "]";
            }
            default:
                return "(reply type " + std::to_string(r->type) + ")";
        }
    }

    Options options_;
    std::vector<std::unique_ptr<RedisServer>> servers_;
    std::vector<RedisContextPtr> connections_;
    std::vector<std::string> ids_;
};

}  // namespace ratelimit_test
