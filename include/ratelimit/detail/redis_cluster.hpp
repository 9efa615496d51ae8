#pragma once

#include <array>
#include <atomic>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/circuit_breaker.hpp>
#include <ratelimit/detail/redis_connection.hpp>
#include <ratelimit/detail/redis_pool.hpp>
#include <ratelimit/redis_options.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Slots of a Redis Cluster.
inline constexpr std::size_t kClusterSlots = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the Cluster's key hash, a byte at a
/// time from a table built at compile time.
inline constexpr std::array<std::uint16_t, 256> kCrc16Table = [] {
    constexpr std::uint16_t kPolynomial = 0x1021;
    constexpr unsigned kTopBit = 0x8000;
    constexpr unsigned kByteBits = 8;
    std::array<std::uint16_t, 256> table{};
    for (unsigned byte = 0; byte < table.size(); ++byte) {
        unsigned crc = byte << kByteBits;
        for (unsigned bit = 0; bit < kByteBits; ++bit) {
            crc = (crc & kTopBit) != 0 ? (crc << 1U) ^ kPolynomial : crc << 1U;
        }
        table[byte] = static_cast<std::uint16_t>(crc);
    }
    return table;
}();

constexpr std::uint16_t crc16(std::string_view bytes) noexcept {
    constexpr unsigned kByteBits = 8;
    constexpr unsigned kByteMask = 0xFF;
    unsigned crc = 0;
    for (const char c : bytes) {
        const unsigned index = ((crc >> kByteBits) ^ static_cast<unsigned char>(c)) & kByteMask;
        crc = (crc << kByteBits) ^ kCrc16Table[index];
    }
    return static_cast<std::uint16_t>(crc);
}

/// The Cluster slot of a Redis key, as the Cluster specification defines it: the hash of its
/// hash tag (the bytes between its first `{` and the first `}` after it, when there is at
/// least one), else of the whole key.
constexpr std::uint16_t clusterSlot(std::string_view key) noexcept {
    std::string_view hashed = key;
    if (const std::size_t open = key.find('{'); open != std::string_view::npos) {
        const std::size_t close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1) {
            hashed = key.substr(open + 1, close - open - 1);
        }
    }
    return static_cast<std::uint16_t>(crc16(hashed) % kClusterSlots);
}

/// One server's connections and circuit breaker: the standalone server, or a Cluster node.
struct RedisNode {
    /// `options` and `counters` are the storage's, which outlive its nodes.
    RedisNode(const RedisStorageOptions& options, std::string host, int port,
              RedisPoolCounters& counters)
        : endpoint(options, std::move(host), port),
          pool(options, endpoint, counters),
          breaker(options.breakerBackoff, options.breakerMaxBackoff, options.breakerClock) {}

    /// The standalone server of `options` (TCP or unix socket).
    RedisNode(const RedisStorageOptions& options, RedisPoolCounters& counters)
        : endpoint(options),
          pool(options, endpoint, counters),
          breaker(options.breakerBackoff, options.breakerMaxBackoff, options.breakerClock) {}

    RedisEndpoint endpoint;
    RedisPool pool;
    CircuitBreaker breaker;
};

/// Where one request goes: a node, and whether `ASKING` must precede it there.
struct RedisRoute {
    RedisNode* node = nullptr;
    bool asking = false;
};

/// A `MOVED` or `ASK` reply: the slot and the node it names.
struct RedisRedirect {
    bool moved = false;  // else ASK
    std::uint16_t slot = 0;
    std::string host;
    int port = 0;
};

/// The redirect `text` (an error reply) names, if it is one; an empty host is `asked`'s (a
/// node that does not know its own address answers so).
inline std::optional<RedisRedirect> redirectOf(std::string_view text, const RedisNode& asked) {
    constexpr std::string_view kMoved = "MOVED ";
    constexpr std::string_view kAsk = "ASK ";
    RedisRedirect r;
    if (text.starts_with(kMoved)) {
        r.moved = true;
        text.remove_prefix(kMoved.size());
    } else if (text.starts_with(kAsk)) {
        text.remove_prefix(kAsk.size());
    } else {
        return std::nullopt;
    }
    const std::size_t space = text.find(' ');
    const std::size_t colon = text.rfind(':');
    if (space == std::string_view::npos || colon == std::string_view::npos || colon < space) {
        return std::nullopt;
    }
    const auto number = [](std::string_view digits, auto& out) {
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
        return ec == std::errc{} && end == digits.data() + digits.size();
    };
    constexpr int kMaxPort = 65535;
    if (!number(text.substr(0, space), r.slot) || r.slot >= kClusterSlots ||
        !number(text.substr(colon + 1), r.port) || r.port < 1 || r.port > kMaxPort) {
        return std::nullopt;
    }
    r.host = std::string(text.substr(space + 1, colon - space - 1));
    if (r.host.empty()) {
        r.host = asked.endpoint.host();
    }
    return r;
}

/// A run of slots and the master serving it, as a slot map lists it.
struct SlotRange {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    std::string host;
    int port = 0;
};

/// The text of a string or status reply; empty for any other.
inline std::string_view textOf(const redisReply* r) noexcept {
    if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) {
        return {};
    }
    return {r->str, r->len};
}

/// Whether `r` is an integer reply that is a slot.
inline bool slotOf(const redisReply* r, std::uint16_t& slot) noexcept {
    if (r == nullptr || r->type != REDIS_REPLY_INTEGER || r->integer < 0 ||
        r->integer >= static_cast<long long>(kClusterSlots)) {
        return false;
    }
    slot = static_cast<std::uint16_t>(r->integer);
    return true;
}

/// The value of `name` in `pairs`, a flat array of names and values; null when absent.
inline const redisReply* valueOf(const redisReply& pairs, std::string_view name) noexcept {
    if (pairs.type != REDIS_REPLY_ARRAY) {
        return nullptr;
    }
    for (std::size_t i = 0; i + 1 < pairs.elements; i += 2) {
        if (textOf(pairs.element[i]) == name) {
            return pairs.element[i + 1];
        }
    }
    return nullptr;
}

/// A shard's master in a `CLUSTER SHARDS` reply's `nodes`: one that is online, else any (a
/// failed master stays listed beside the replica promoted in its place); port 0 when the shard
/// lists none. `asked` fills in an unknown address.
inline SlotRange shardMaster(const redisReply& nodes, const RedisNode& asked) {
    SlotRange master;
    bool online = false;
    for (std::size_t n = 0; n < nodes.elements; ++n) {
        const redisReply& node = *nodes.element[n];
        const redisReply* port = valueOf(node, "port");
        if (textOf(valueOf(node, "role")) != "master" || port == nullptr ||
            port->type != REDIS_REPLY_INTEGER || (online && master.port != 0)) {
            continue;
        }
        std::string_view host = textOf(valueOf(node, "endpoint"));
        if (host.empty() || host == "?") {
            host = textOf(valueOf(node, "ip"));
        }
        master.host = host.empty() ? asked.endpoint.host() : std::string(host);
        master.port = static_cast<int>(port->integer);
        online = textOf(valueOf(node, "health")) == "online";
    }
    return master;
}

/// The masters' slot ranges in a `CLUSTER SHARDS` reply (Redis 7): per shard `slots` (pairs of
/// bounds) and `nodes` (each a flat list of names and values: `endpoint`, `ip`, `port`,
/// `role`, `health`, ...). Empty when the reply has another shape.
inline std::vector<SlotRange> shardsRanges(const redisReply& reply, const RedisNode& asked) {
    std::vector<SlotRange> out;
    if (reply.type != REDIS_REPLY_ARRAY) {
        return out;
    }
    for (std::size_t s = 0; s < reply.elements; ++s) {
        const redisReply* slots = valueOf(*reply.element[s], "slots");
        const redisReply* nodes = valueOf(*reply.element[s], "nodes");
        if (slots == nullptr || nodes == nullptr || slots->type != REDIS_REPLY_ARRAY ||
            nodes->type != REDIS_REPLY_ARRAY) {
            return {};
        }
        const SlotRange master = shardMaster(*nodes, asked);
        if (master.port == 0) {
            continue;  // no master: its slots keep their node
        }
        for (std::size_t i = 0; i + 1 < slots->elements; i += 2) {
            SlotRange range = master;
            if (!slotOf(slots->element[i], range.first) ||
                !slotOf(slots->element[i + 1], range.last)) {
                return {};
            }
            out.push_back(std::move(range));
        }
    }
    return out;
}

/// The masters' slot ranges in a `CLUSTER SLOTS` reply (Redis 6): per range its bounds, then
/// its master's address (empty or nil: `asked`'s; `?`: not known yet, the range is left out),
/// then its replicas'. Empty when the reply has another shape.
inline std::vector<SlotRange> slotsRanges(const redisReply& reply, const RedisNode& asked) {
    std::vector<SlotRange> out;
    if (reply.type != REDIS_REPLY_ARRAY) {
        return out;
    }
    constexpr std::size_t kMasterAt = 2;
    for (std::size_t r = 0; r < reply.elements; ++r) {
        const redisReply* entry = reply.element[r];
        SlotRange range;
        if (entry->type != REDIS_REPLY_ARRAY || entry->elements <= kMasterAt ||
            !slotOf(entry->element[0], range.first) || !slotOf(entry->element[1], range.last)) {
            return {};
        }
        const redisReply* master = entry->element[kMasterAt];
        if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 ||
            master->element[1]->type != REDIS_REPLY_INTEGER) {
            return {};
        }
        const std::string_view host = textOf(master->element[0]);
        if (host == "?") {
            continue;  // a master whose address is not known yet: its slots keep their node
        }
        range.host = host.empty() ? asked.endpoint.host() : std::string(host);
        range.port = static_cast<int>(master->element[1]->integer);
        out.push_back(std::move(range));
    }
    return out;
}

/// A Redis Cluster as one process sees it: its nodes (each with its own connections and
/// breaker) and the slot map, read from the nodes at the first call, and again, at most once per
/// `clusterRefreshInterval`, after a `MOVED` (once the call is answered) or a node's failure.
/// Until the first read, every slot goes to the first seed, whose `MOVED` replies are followed.
/// A `MOVED` moves its slot at once; an `ASK` leaves the map as it is. Replicas are never used:
/// a check writes. Nodes are never forgotten (at most `kMaxNodes` over the process's life).
/// Thread safety: thread-safe. Routing reads two atomics; the map is read by one caller at
/// a time while the others route by the map as it is.
class RedisCluster {
public:
    /// Nodes one process keeps at most (a Cluster is meant for up to 1000).
    static constexpr std::size_t kMaxNodes = 1024;

    /// `options`, `counters` and `mapReads` are the storage's, which outlives its links.
    RedisCluster(const RedisStorageOptions& options, RedisPoolCounters& counters,
                 std::atomic<std::uint64_t>& mapReads)
        : options_(options), counters_(counters), mapReads_(mapReads) {
        const std::lock_guard<std::mutex> lock(mutex_);
        for (const RedisNodeAddress& seed : options_.cluster) {
            (void)indexOf(seed.host, seed.port);
        }
    }

    /// The master serving `slot` by the map, which is read first when it never was and a read
    /// is due.
    RedisNode& owner(std::uint16_t slot, Deadline deadline) {
        if (!loaded_.load(std::memory_order_acquire)) {
            refresh(deadline);
        }
        return *nodes_[slots_[slot].load(std::memory_order_acquire)].load(
            std::memory_order_acquire);
    }

    /// The node a `MOVED` or `ASK` reply of `asked` names, the map updated for `MOVED` (and
    /// read again after the call, `afterCall`); nullopt when the reply is no redirect or names
    /// one node too many.
    std::optional<RedisRoute> redirect(std::string_view reply, const RedisNode& asked) {
        std::optional<RedisRedirect> r = redirectOf(reply, asked);
        if (!r) {
            return std::nullopt;
        }
        std::uint16_t index = 0;
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            const std::optional<std::uint16_t> found = indexOf(r->host, r->port);
            if (!found) {
                return std::nullopt;
            }
            index = *found;
        }
        if (r->moved) {
            slots_[r->slot].store(index, std::memory_order_release);
            stale_.store(true, std::memory_order_release);
        }
        return RedisRoute{nodes_[index].load(std::memory_order_acquire), !r->moved};
    }

    /// After a call was answered: the map is read again when a `MOVED` said it changed and a
    /// read is due, within what is left of the call's deadline.
    void afterCall(Deadline deadline) {
        if (stale_.load(std::memory_order_acquire)) {
            refresh(deadline);
        }
    }

    /// After a node failed or its breaker answered: the map is read again when due, so that a
    /// replica promoted in its place takes its slots.
    void nodeFailed(Deadline deadline) {
        stale_.store(true, std::memory_order_release);
        refresh(deadline);
    }

private:
    /// Reads the map if no read is under way and the last ended `clusterRefreshInterval` ago.
    /// A read that found no time to ask any node leaves the next caller to try.
    void refresh(Deadline deadline) {
        const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
        if (now < nextRead_.load(std::memory_order_acquire)) {
            return;
        }
        if (reading_.exchange(true, std::memory_order_acquire)) {
            return;  // another caller reads it; this one routes by the map as it is
        }
        if (now < nextRead_.load(std::memory_order_acquire)) {
            reading_.store(false, std::memory_order_release);
            return;  // one ended in between
        }
        bool asked = false;
        try {
            asked = read(deadline);
        } catch (...) {  // std::bad_alloc: the next due caller reads it again
            endRead(true);
            throw;
        }
        endRead(asked);
    }

    /// Lets another read start: after the interval when this one asked a node, at once when it
    /// found no time to.
    void endRead(bool asked) noexcept {
        if (asked) {
            const auto next = std::chrono::steady_clock::now() + options_.clusterRefreshInterval;
            nextRead_.store(next.time_since_epoch().count(), std::memory_order_release);
        }
        reading_.store(false, std::memory_order_release);
    }

    /// Asks the nodes whose breaker is closed, each read starting at the next one, for the map
    /// until one answers, and routes every slot it lists to its master. Each node gets a
    /// quarter of the storage's timeout at most, so one that does not answer cannot hold the
    /// read past it, and the read stops when the call's deadline leaves no such share. False
    /// when no node was asked.
    bool read(Deadline deadline) {
        const std::size_t known = count_.load(std::memory_order_acquire);
        const auto share = std::max<std::chrono::steady_clock::duration>(
            std::chrono::milliseconds{1}, options_.timeout / 4);
        const std::size_t first = firstAsked_++;
        bool asked = false;
        for (std::size_t n = 0; n < known; ++n) {
            RedisNode& node = *nodes_[(first + n) % known].load(std::memory_order_acquire);
            const auto now = std::chrono::steady_clock::now();
            if (deadline - now < share) {
                break;
            }
            if (node.breaker.isOpen()) {
                continue;  // its calls probe it; a map read would only wait on it
            }
            asked = true;
            std::vector<SlotRange> ranges = rangesFrom(node, now + share);
            if (!ranges.empty()) {
                apply(ranges);
                stale_.store(false, std::memory_order_release);
                break;
            }
        }
        return asked;
    }

    /// The map as `node` sees it: `CLUSTER SHARDS`, or `CLUSTER SLOTS` before Redis 7. Empty
    /// when it does not answer in time or with a map.
    std::vector<SlotRange> rangesFrom(RedisNode& node, Deadline deadline) {
        mapReads_.fetch_add(1, std::memory_order_relaxed);
        for (const std::string_view subcommand : {"SHARDS", "SLOTS"}) {
            std::string request;
            appendCommand(request, {"CLUSTER", subcommand});
            IoStatus status;
            const ReplyPtr reply = node.pool.exchange(request, deadline, status);
            if (!reply) {
                return {};
            }
            if (reply->type == REDIS_REPLY_ERROR) {
                continue;  // Redis 6 knows no CLUSTER SHARDS
            }
            return subcommand == "SHARDS" ? shardsRanges(*reply, node) : slotsRanges(*reply, node);
        }
        return {};
    }

    void apply(const std::vector<SlotRange>& ranges) {
        const std::lock_guard<std::mutex> lock(mutex_);
        for (const SlotRange& range : ranges) {
            const std::optional<std::uint16_t> index = indexOf(range.host, range.port);
            if (!index) {
                continue;
            }
            for (std::size_t slot = range.first; slot <= range.last; ++slot) {
                slots_[slot].store(*index, std::memory_order_release);
            }
        }
        loaded_.store(true, std::memory_order_release);
    }

    /// The index of the node at `host` and `port`, added if new; nullopt when `kMaxNodes` are
    /// known. Lock held.
    std::optional<std::uint16_t> indexOf(const std::string& host, int port) {
        const std::size_t known = count_.load(std::memory_order_relaxed);
        for (std::size_t i = 0; i < known; ++i) {
            const RedisEndpoint& e = owned_[i]->endpoint;
            if (e.host() == host && e.port() == port) {
                return static_cast<std::uint16_t>(i);
            }
        }
        if (known == kMaxNodes) {
            return std::nullopt;
        }
        owned_.push_back(std::make_unique<RedisNode>(options_, host, port, counters_));
        nodes_[known].store(owned_.back().get(), std::memory_order_release);
        count_.store(known + 1, std::memory_order_release);
        return static_cast<std::uint16_t>(known);
    }

    const RedisStorageOptions& options_;
    RedisPoolCounters& counters_;
    std::atomic<std::uint64_t>& mapReads_;
    std::mutex mutex_;                               // taken to add a node or apply a map
    std::vector<std::unique_ptr<RedisNode>> owned_;  // guarded by mutex_; never shrinks
    std::array<std::atomic<RedisNode*>, kMaxNodes> nodes_{};
    std::atomic<std::size_t> count_{0};
    std::array<std::atomic<std::uint16_t>, kClusterSlots> slots_{};  // 0: the first seed
    std::atomic<bool> loaded_{false};
    std::atomic<bool> stale_{false};         // a MOVED or a failure since the last read
    std::atomic<bool> reading_{false};       // a caller reads the map; it alone uses firstAsked_
    std::atomic<std::int64_t> nextRead_{0};  // steady-clock count
    std::size_t firstAsked_ = 0;             // where the next read starts
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
