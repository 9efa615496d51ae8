#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/function.hpp>
#include <ratelimit/detail/redis_connection.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Many callers' requests over few connections, with no thread of its own (flat combining):
/// a caller queues its request on a connection (a lane); the first caller to find that lane
/// idle becomes its leader, writes every queued request in one write, reads the replies in
/// order and hands each waiting caller its own. The others wait on their own condition
/// variable within their own deadline; when a batch ends, its leader wakes the next queued
/// caller to lead the next one.
///
/// Failure rules (docs/redis.md): a caller whose deadline passes while its
/// request is queued takes it back (never sent: kTimeout); once sent, its reply is read and
/// dropped, never given to anyone else (kOutcomeUnknown). A transport error or timeout while
/// the leader writes or reads fails every request of the batch (kOutcomeUnknown once any byte
/// of it left, its own error before) and closes the connection; so does, once its replies are
/// read, an error reply that says the link is unusable (auth, protocol, busy). A connection
/// that broke after serving requests is replaced at once, and a batch none of whose bytes left
/// it goes once more on the new one (`worthReconnecting`).
/// Thread safety: thread-safe.
class RedisPipeline {
public:
    /// Opens and prepares (AUTH, SELECT) a connection within the deadline.
    using Connector = std::function<std::unique_ptr<RedisConnection>(Deadline, IoStatus&)>;

    /// `writes` counts the writes (each carrying one batch).
    RedisPipeline(std::size_t connections, std::size_t maxBatch, Connector connect,
                  std::atomic<std::uint64_t>& writes)
        : maxLanes_(connections),
          maxBatch_(maxBatch),
          connect_(std::move(connect)),
          writes_(writes) {
        lanes_.reserve(maxLanes_);
    }

    /// Sends one request and returns its reply, or null with `status` set (kOutcomeUnknown
    /// when it may have run).
    ReplyPtr exchange(std::string_view bytes, Deadline deadline, IoStatus& status) {
        Request me;
        me.bytes = bytes;
        me.deadline = deadline;
        std::unique_lock<std::mutex> lock(mutex_);
        Lane& lane = pickLane();
        me.lane = &lane;
        lane.pending.push_back(&me);
        for (;;) {
            if (me.state == State::kDone) {
                status = std::move(me.status);
                return std::move(me.reply);
            }
            if (me.state == State::kQueued && !lane.busy && lane.pending.front() == &me) {
                if (std::chrono::steady_clock::now() >= deadline) {
                    break;  // too late to lead: a batch must not start with an expired deadline
                }
                lead(lane, me, lock);
                continue;  // done now
            }
            if (me.wake.wait_until(lock, deadline) == std::cv_status::timeout &&
                me.state != State::kDone) {
                break;
            }
        }
        giveUp(lane, me, status);
        return nullptr;
    }

private:
    enum class State : std::uint8_t { kQueued, kSent, kDone };

    struct Lane;

    /// One call's request, on its caller's stack for the whole call.
    struct Request {
        std::string_view bytes;
        Deadline deadline{};
        State state = State::kQueued;
        Lane* lane = nullptr;
        std::size_t slot = 0;  // index in the lane's batch once sent
        ReplyPtr reply;
        IoStatus status;
        std::condition_variable wake;
    };

    struct Lane {
        std::unique_ptr<RedisConnection> conn;  // used by the leader alone while busy
        std::vector<Request*> pending;          // queued, oldest first; guarded by mutex_
        std::vector<Request*> batch;            // sent, in order; null: its caller gave up
        std::vector<std::size_t> batchEnds;     // where each request's bytes end in the write
        std::string followers;                  // the batch's requests after the leader's
        std::vector<ReplyPtr> replies;          // read, not yet handed out
        bool busy = false;                      // a leader owns conn, batch and followers
    };

    /// An idle lane (the first: its connection stays warm), else a new one while fewer than
    /// the maximum exist, else the lane with the shortest queue.
    Lane& pickLane() {
        Lane* shortest = nullptr;
        for (const auto& l : lanes_) {
            if (!l->busy && l->pending.empty()) {
                return *l;
            }
            if (shortest == nullptr || l->pending.size() < shortest->pending.size()) {
                shortest = l.get();
            }
        }
        if (lanes_.size() < maxLanes_) {
            lanes_.push_back(std::make_unique<Lane>());
            return *lanes_.back();
        }
        return *shortest;
    }

    /// Called with the lock held by the caller at the head of an idle lane's queue; returns
    /// with it held and `me` done.
    void lead(Lane& lane, Request& me, std::unique_lock<std::mutex>& lock) {
        lane.busy = true;
        const std::size_t n = std::min(lane.pending.size(), maxBatch_);
        lane.batch.assign(lane.pending.begin(),
                          lane.pending.begin() + static_cast<std::ptrdiff_t>(n));
        lane.pending.erase(lane.pending.begin(),
                           lane.pending.begin() + static_cast<std::ptrdiff_t>(n));
        // The followers' bytes are copied while they are sure to exist: one who gives up
        // during the write returns and frees its own.
        lane.followers.clear();
        lane.batchEnds.clear();
        std::size_t end = 0;
        for (std::size_t i = 0; i < n; ++i) {
            Request* r = lane.batch[i];
            r->state = State::kSent;
            r->slot = i;
            end += r->bytes.size();
            lane.batchEnds.push_back(end);
            if (i > 0) {
                lane.followers.append(r->bytes);
            }
        }
        lock.unlock();

        // Nothing else touches the lane's connection, batch bytes or replies while it is busy.
        if (writeBatch(lane, me, lock)) {
            readReplies(lane, me, lock);
        }
        if (lane.conn) {
            lane.conn->idleFrom(std::chrono::steady_clock::now());
        }
        lock.lock();
        lane.batch.clear();
        lane.busy = false;
        if (!lane.pending.empty()) {
            lane.pending.front()->wake.notify_one();
        }
    }

    /// Connects if need be and writes the batch; on failure fails all of it. Lock not held.
    bool writeBatch(Lane& lane, const Request& me, std::unique_lock<std::mutex>& lock) {
        if (lane.conn && lane.conn->stale(std::chrono::steady_clock::now())) {
            lane.conn.reset();  // closed by the server while idle (a restart): dropped unused
        }
        IoStatus status;
        if (!lane.conn) {
            lane.conn = connect_(me.deadline, status);
        }
        const std::array<std::string_view, 2> parts = {me.bytes, lane.followers};
        std::size_t sent = 0;
        while (lane.conn) {
            writes_.fetch_add(1, std::memory_order_relaxed);
            if (lane.conn->send(parts, me.deadline, status, sent)) {
                return true;
            }
            if (!replaceBroken(lane, me.deadline, status) || sent > 0) {
                break;
            }  // else none of it left: it goes once more, on the new connection
        }
        lock.lock();
        failFrom(lane, 0, status, sent);  // with no connection nothing left: the connect's error
        lock.unlock();
        return false;
    }

    /// Reads the batch's replies in order and hands each to its caller; on failure fails the
    /// rest. Lock not held.
    void readReplies(Lane& lane, const Request& me, std::unique_lock<std::mutex>& lock) {
        bool closeAfter = false;
        const std::size_t n = lane.batch.size();  // only the leader changes its size
        std::size_t answered = 0;
        std::vector<ReplyPtr>& replies = lane.replies;
        while (answered < n) {
            // One reply, waiting for it if need be, then those already read with it: handed
            // out under one lock.
            IoStatus status;
            replies.clear();
            for (ReplyPtr reply = lane.conn->receive(me.deadline, status); reply != nullptr;) {
                closeAfter = closeAfter || closesConnection(*reply);
                replies.push_back(std::move(reply));
                reply = answered + replies.size() < n ? lane.conn->buffered(status) : nullptr;
            }
            lock.lock();
            for (ReplyPtr& r : replies) {
                if (Request* caller = lane.batch[answered]; caller != nullptr) {
                    caller->reply = std::move(r);
                    caller->state = State::kDone;
                    if (caller != &me) {
                        caller->wake.notify_one();
                    }
                }
                ++answered;  // a reply whose caller gave up is dropped here, read by no one
            }
            lock.unlock();
            if (!status.ok()) {
                replaceBroken(lane, me.deadline, status);
                closeAfter = false;  // the connection it concerned is gone
                lock.lock();
                failFrom(lane, answered, status, std::string_view::npos);
                lock.unlock();
                answered = n;
            }
        }
        replies.clear();
        if (closeAfter) {
            lane.conn.reset();
        }
    }

    /// Closes the lane's connection after `status` failed it, and opens one new connection in
    /// its place when the failure is worth it (`worthReconnecting`); true when that one
    /// connected (`status.serverUp`). Lock not held.
    bool replaceBroken(Lane& lane, Deadline deadline, IoStatus& status) {
        const bool reconnect = worthReconnecting(status, *lane.conn);
        lane.conn.reset();
        if (reconnect) {
            IoStatus ignored;  // a failed reconnect leaves the original failure to count
            lane.conn = connect_(deadline, ignored);
            status.serverUp = lane.conn != nullptr;
        }
        return status.serverUp;
    }

    /// Fails the batch's requests from `first` on with `status`. `sent` bytes of the batch
    /// left (npos: all): a request none of whose bytes left was not sent and keeps the error
    /// as it is; the others may have run. Lock held.
    void failFrom(Lane& lane, std::size_t first, const IoStatus& status, std::size_t sent) {
        for (std::size_t i = first; i < lane.batch.size(); ++i) {
            Request* r = lane.batch[i];
            const std::size_t begin = i == 0 ? 0 : lane.batchEnds[i - 1];
            const bool anyByteLeft = sent == std::string_view::npos || sent > begin;
            if (r == nullptr) {
                continue;
            }
            r->status = status;
            if (anyByteLeft) {
                r->status.error = StoreError::kOutcomeUnknown;
            }
            r->state = State::kDone;
            r->wake.notify_one();
        }
    }

    /// The caller's deadline passed before its reply came. Lock held.
    void giveUp(Lane& lane, Request& me, IoStatus& status) {
        if (me.state == State::kQueued) {
            lane.pending.erase(std::find(lane.pending.begin(), lane.pending.end(), &me));
            if (!lane.busy && !lane.pending.empty()) {
                lane.pending.front()->wake.notify_one();
            }
            status = {StoreError::kTimeout, "queued for a pipelined connection until the deadline"};
            return;
        }
        // Sent: the leader reads the reply and drops it.
        lane.batch[me.slot] = nullptr;
        status = {StoreError::kOutcomeUnknown, "no reply within the deadline"};
    }

    const std::size_t maxLanes_;
    const std::size_t maxBatch_;
    const Connector connect_;
    std::atomic<std::uint64_t>& writes_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<Lane>> lanes_;  // guarded by mutex_
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
