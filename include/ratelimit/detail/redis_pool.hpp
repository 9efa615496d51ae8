#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/redis_connection.hpp>
#include <ratelimit/detail/redis_pipeline.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/redis_options.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Counters a `RedisPool` keeps for `RedisStats`.
struct RedisPoolCounters {
    std::atomic<std::uint64_t> connectsOpened{0};
    std::atomic<std::uint64_t> writes{0};
};

/// The connections of one `RedisStorage`: shared by concurrent callers through a pipeline
/// (`RedisStorageOptions::pipelining`), or a pool handing each caller a connection of its
/// own; each one connected and prepared (`AUTH`, `SELECT`) within the deadline of the call that
/// opens it. One process's: a forked child makes its own (see `RedisLink`).
/// Thread safety: thread-safe.
class RedisPool {
public:
    /// `options` and `counters` are the storage's, which outlives its pools; `endpoint` is the
    /// pool's link's.
    RedisPool(const RedisStorageOptions& options, RedisEndpoint& endpoint,
              RedisPoolCounters& counters)
        : options_(options), endpoint_(endpoint), counters_(counters) {
        if (options_.pipelining) {
            pipeline_ = std::make_unique<RedisPipeline>(
                std::min(options_.pipelineConnections, options_.poolSize), options_.maxPipeline,
                [this](Deadline deadline, IoStatus& status) { return connect(deadline, status); },
                counters_.writes);
        }
    }

    /// Sends one request and reads its reply within the deadline, over the pipeline or a
    /// pooled connection of its own. Null with `status` set when no reply came.
    ReplyPtr exchange(std::string_view request, Deadline deadline, IoStatus& status) {
        if (pipeline_) {
            return pipeline_->exchange(request, deadline, status);
        }
        return exchangeAlone(request, 1, deadline, status);
    }

    /// `ASKING`, then `request`, on a pooled connection of the call's own even with
    /// pipelining: the flag holds for the next command of one connection only. `request`'s
    /// reply, or `ASKING`'s when that was refused.
    ReplyPtr exchangeAsking(std::string_view request, Deadline deadline, IoStatus& status) {
        std::string both;
        appendCommand(both, {"ASKING"});
        both.append(request);
        return exchangeAlone(both, 2, deadline, status);
    }

private:
    /// Sends `request`, `commands` commands, on a pooled connection of the call's own and
    /// reads their replies: the first that is an error, else the last.
    ReplyPtr exchangeAlone(std::string_view request, std::size_t commands, Deadline deadline,
                           IoStatus& status) {
        auto conn = acquire(deadline, status);
        std::size_t sent = 0;
        while (conn) {
            counters_.writes.fetch_add(1, std::memory_order_relaxed);
            ReplyPtr reply =
                conn->send(std::span<const std::string_view>(&request, 1), deadline, status, sent)
                    ? receive(*conn, commands, deadline, status)
                    : nullptr;
            if (reply) {
                release(std::move(conn), !closesConnection(*reply));
                return reply;
            }
            // A connection that saw any transport error is closed, never reused.
            const bool reconnect = worthReconnecting(status, *conn);
            release(std::move(conn), false);
            if (!reconnect) {
                break;
            }
            conn = openSpare(deadline);
            status.serverUp = conn != nullptr;
            if (conn && sent > 0) {
                release(std::move(conn), true);  // not for this request, which may have run
                break;
            }  // else none of it left: it goes once more, on the new connection
        }
        return nullptr;
    }

    /// The replies of `commands` commands sent on `conn`: the first error, else the last.
    static ReplyPtr receive(RedisConnection& conn, std::size_t commands, Deadline deadline,
                            IoStatus& status) {
        ReplyPtr kept;
        for (std::size_t i = 0; i < commands; ++i) {
            ReplyPtr reply = conn.receive(deadline, status);
            if (!reply) {
                return nullptr;
            }
            if (!kept || kept->type != REDIS_REPLY_ERROR) {
                kept = std::move(reply);
            }
        }
        return kept;
    }

    /// A connection for one call: an idle one, or a new one (connected and authenticated
    /// within the deadline) while fewer than `poolSize` are open.
    std::unique_ptr<RedisConnection> acquire(Deadline deadline, IoStatus& status) {
        std::unique_lock<std::mutex> lock(poolMutex_);
        for (;;) {
            while (!idle_.empty()) {
                auto c = std::move(idle_.back());
                idle_.pop_back();
                if (!c->stale(std::chrono::steady_clock::now())) {
                    return c;
                }
                --open_;  // closed by the server while idle (a restart): dropped unused
            }
            if (open_ < options_.poolSize) {
                return open(lock, deadline, status);
            }
            if (poolFree_.wait_until(lock, deadline) == std::cv_status::timeout) {
                status = {StoreError::kTimeout,
                          formatted("all {} connections stayed busy until the deadline",
                                    {options_.poolSize})};
                return nullptr;
            }
        }
    }

    /// A new connection in place of one that broke (`worthReconnecting`), if a place is free
    /// at once; null when none is or it does not connect within the deadline.
    std::unique_ptr<RedisConnection> openSpare(Deadline deadline) {
        std::unique_lock<std::mutex> lock(poolMutex_);
        if (open_ >= options_.poolSize) {
            return nullptr;
        }
        IoStatus ignored;  // a failed reconnect leaves the original failure to count
        return open(lock, deadline, ignored);
    }

    /// Takes a free place (`lock` held, `open_ < poolSize`) and connects into it, the lock
    /// released meanwhile; null with `status` set when that fails (the place is free again).
    std::unique_ptr<RedisConnection> open(std::unique_lock<std::mutex>& lock, Deadline deadline,
                                          IoStatus& status) {
        ++open_;
        lock.unlock();
        auto c = connect(deadline, status);
        if (!c) {
            lock.lock();
            --open_;
            poolFree_.notify_one();
        }
        return c;
    }

    /// Returns a connection; one that saw any error is closed instead.
    void release(std::unique_ptr<RedisConnection> c, bool reusable) {
        std::unique_lock<std::mutex> lock(poolMutex_);
        if (reusable) {
            c->idleFrom(std::chrono::steady_clock::now());
            idle_.push_back(std::move(c));
        } else {
            --open_;
            lock.unlock();
            c.reset();
            lock.lock();
        }
        poolFree_.notify_one();
    }

    std::unique_ptr<RedisConnection> connect(Deadline deadline, IoStatus& status) {
        auto c = connectTo(endpoint_, deadline, status);
        if (!c) {
            return nullptr;
        }
        counters_.connectsOpened.fetch_add(1, std::memory_order_relaxed);
        std::string request;
        if (!options_.password.empty()) {
            if (options_.user.empty()) {
                appendCommand(request, {"AUTH", options_.password});
            } else {
                appendCommand(request, {"AUTH", options_.user, options_.password});
            }
            if (!handshake(*c, request, deadline, status)) {
                return nullptr;
            }
        }
        if (options_.database != 0) {
            request.clear();
            appendCommand(request, {"SELECT", std::to_string(options_.database)});
            if (!handshake(*c, request, deadline, status)) {
                return nullptr;
            }
        }
        return c;
    }

    static bool handshake(RedisConnection& c, const std::string& request, Deadline deadline,
                          IoStatus& status) {
        const ReplyPtr reply = c.roundTrip(request, deadline, status);
        if (!reply) {
            if (status.error == StoreError::kOutcomeUnknown) {
                status.error = StoreError::kTimeout;  // a handshake changes no data
            }
            return false;
        }
        if (reply->type == REDIS_REPLY_ERROR) {
            status = {StoreError::kAuth, std::string(reply->str, reply->len)};
            return false;
        }
        return true;
    }

    const RedisStorageOptions& options_;
    RedisEndpoint& endpoint_;
    RedisPoolCounters& counters_;
    std::mutex poolMutex_;
    std::condition_variable poolFree_;
    std::vector<std::unique_ptr<RedisConnection>> idle_;  // guarded by poolMutex_
    std::size_t open_ = 0;                                // guarded by poolMutex_
    std::unique_ptr<RedisPipeline> pipeline_;             // null without pipelining
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
