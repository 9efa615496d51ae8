#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
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

/// Many callers' requests over few connections (lanes), with no thread of its own: the callers
/// take turns at a lane's two roles. A caller queues its request; the first to find no one
/// writing on the lane writes every queued request in one write, its own first. A caller whose
/// request is written and finds no one reading reads the lane's replies in order, hands each
/// waiting caller its own, and stops once it has its own, waking the caller of the oldest
/// request still unanswered to read on. So a write need not wait for the replies of the last
/// one: while the server runs one batch the next is already in its socket, and the server,
/// which reads whatever arrived while it was busy in one go, serves them in fewer, larger
/// rounds (bench/README.md, "The Redis pipeline: writes that do not wait for replies").
///
/// Waiting callers sleep on condition variables the pipeline keeps for its life (one per caller
/// in a call), and are woken after the lock is let go: woken under it, each ran only to sleep
/// again on the lock. A wake that reaches a variable's next user is a spurious wake, which it
/// waits through.
///
/// Failure rules (docs/redis.md):
/// - A caller whose deadline passes while its request is queued takes it back, never sent
///   (kTimeout). Once written, it gives up alone (kOutcomeUnknown): its reply is read later by
///   whoever reads, and dropped.
/// - A transport error or an unparsable reply fails every written request not yet answered on
///   that connection (kOutcomeUnknown) and closes it; so does a write that timed out once any
///   of its bytes left. A request none of whose bytes left is not sent: when the connection
///   broke after the server had served it (`worthReconnecting`), it goes once more on a new
///   one; when the write timed out, it is queued again unless its caller's deadline passed;
///   else it fails with the write's error.
/// - A connection left holding only replies no one waits for is closed.
/// - The connection that failed is replaced at once when it broke after serving requests, and
///   the requests it failed then tell the breaker that the server is up (`IoStatus::serverUp`).
/// - An error reply that says the link is unusable (auth, protocol, busy) closes the connection
///   once the replies of the requests written before it are read.
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
        me.wake = takeWaker();
        Lane& lane = pickLane();
        lane.pending.push_back(&me);
        for (;;) {
            if (me.state == State::kDone) {
                status = std::move(me.status);
                wakers_.push_back(me.wake);
                return std::move(me.reply);
            }
            if (me.state == State::kQueued && lane.writable()) {
                const auto now = std::chrono::steady_clock::now();
                if (now >= deadline) {
                    break;  // too late to write: a write must not start with an expired deadline
                }
                write(lane, &me, deadline, now, lock);
                continue;
            }
            if (me.state == State::kSent && lane.readable()) {
                read(lane, me, lock);
                continue;
            }
            if (me.wake->wait_until(lock, deadline) == std::cv_status::timeout &&
                me.state != State::kDone) {
                break;
            }
        }
        giveUp(lane, me, status, lock);
        wakers_.push_back(me.wake);
        return nullptr;
    }

private:
    enum class State : std::uint8_t { kQueued, kSent, kDone };

    /// What a waiting caller sleeps on.
    using Waker = std::condition_variable;

    /// One call's request, on its caller's stack for the whole call.
    struct Request {
        std::string_view bytes;
        Deadline deadline{};
        State state = State::kQueued;
        std::uint64_t seq = 0;  // its place in its lane's replies once written
        bool resent = false;    // taken back unsent once, to go on a new connection
        ReplyPtr reply;
        IoStatus status;
        Waker* wake = nullptr;  // the pipeline's, lent for the call
    };

    /// One connection and the requests on it. Guarded by `mutex_`, except what a role's
    /// holder uses alone while it holds the role (marked).
    struct Lane {
        /// Written by the writer and read by the reader at once, each in its own direction;
        /// replaced only while neither runs, or by a writer with nothing else in flight. Null
        /// only with nothing in flight.
        std::unique_ptr<RedisConnection> conn;
        std::vector<Request*> pending;  // queued, oldest first
        std::deque<Request*> inFlight;  // written (or being written), in order; null: gave up
        std::uint64_t firstSeq = 0;     // the seq of inFlight.front()
        std::uint64_t nextSeq = 0;      // the seq of the next request written
        bool writing = false;
        bool writerAlone = false;  // the writer may replace the connection: no one may read
        bool reading = false;
        /// No more writes on this connection: it closes once nothing live is in flight and
        /// neither role runs.
        bool retiring = false;
        /// It failed (`failure`): what is in flight is failed, not read.
        bool failed = false;
        IoStatus failure;
        Waker* readerWake = nullptr;
        std::string others;                  // the writer's: its batch after its own request
        std::vector<std::size_t> batchEnds;  // the writer's: where each request's bytes end
        std::vector<ReplyPtr> replies;       // the reader's: read, not yet handed out
        std::vector<Waker*> answered;        // the reader's: callers handed a reply, to wake

        [[nodiscard]] bool writable() const noexcept { return !writing && !retiring; }
        [[nodiscard]] bool readable() const noexcept {
            return !reading && !failed && !(writing && writerAlone);
        }
        [[nodiscard]] bool idle() const noexcept {
            return pending.empty() && inFlight.empty() && !writing && !reading;
        }
        [[nodiscard]] Request* firstLive() const noexcept {
            const auto live = std::find_if(inFlight.begin(), inFlight.end(),
                                           [](const Request* r) { return r != nullptr; });
            return live == inFlight.end() ? nullptr : *live;
        }
    };

    /// A waker for a new call. Lock held.
    Waker* takeWaker() {
        if (wakers_.empty()) {
            allWakers_.push_back(std::make_unique<Waker>());
            wakers_.reserve(allWakers_.size());  // so a call gives its waker back without throwing
            return allWakers_.back().get();
        }
        Waker* w = wakers_.back();
        wakers_.pop_back();
        return w;
    }

    /// An idle lane (the first: its connection stays warm), else a new one while fewer than
    /// the maximum exist, else the lane with the fewest requests queued and in flight.
    Lane& pickLane() {
        Lane* shortest = nullptr;
        const auto load = [](const Lane& l) { return l.pending.size() + l.inFlight.size(); };
        for (const auto& l : lanes_) {
            if (l->idle()) {
                return *l;
            }
            if (shortest == nullptr || load(*l) < load(*shortest)) {
                shortest = l.get();
            }
        }
        if (lanes_.size() < maxLanes_) {
            lanes_.push_back(std::make_unique<Lane>());
            return *lanes_.back();
        }
        return *shortest;
    }

    /// Writes the queued requests, `own` first when the writer is a queued caller (null when
    /// it is the reader), within `deadline`. Called with the lock held on a writable lane;
    /// returns with it held, each request written, taken back to be sent once more, or failed.
    /// `now` is the caller's last read of the clock, just before: what a writer alone on the lane
    /// judges an idle connection by (`send`), so a check reads the clock once for its deadline
    /// and its idle connection both (bench/README.md, "Redis: the request in place, fewer clock
    /// reads").
    void write(Lane& lane, Request* own, Deadline deadline,
               std::chrono::steady_clock::time_point now, std::unique_lock<std::mutex>& lock) {
        lane.writing = true;
        lane.writerAlone = lane.inFlight.empty() && !lane.reading;
        if (own != nullptr) {
            lane.pending.erase(std::find(lane.pending.begin(), lane.pending.end(), own));
        }
        const std::size_t others =
            std::min(lane.pending.size(), own != nullptr ? maxBatch_ - 1 : maxBatch_);
        const std::uint64_t batchStart = lane.nextSeq;
        // The others' bytes are copied while they are sure to exist: one who gives up during
        // the write returns and frees its own.
        lane.others.clear();
        lane.batchEnds.clear();
        std::size_t end = 0;
        const auto add = [&](Request* r) {
            r->state = State::kSent;
            r->seq = lane.nextSeq++;
            lane.inFlight.push_back(r);
            end += r->bytes.size();
            lane.batchEnds.push_back(end);
        };
        if (own != nullptr) {
            add(own);
        }
        for (std::size_t i = 0; i < others; ++i) {
            add(lane.pending[i]);
            lane.others.append(lane.pending[i]->bytes);
        }
        lane.pending.erase(lane.pending.begin(),
                           lane.pending.begin() + static_cast<std::ptrdiff_t>(others));
        lock.unlock();

        IoStatus status;
        std::size_t sent = 0;
        const std::string_view ownBytes = own != nullptr ? own->bytes : std::string_view();
        const bool ok = send(lane, ownBytes, deadline, now, status, sent);
        lock.lock();
        lane.writing = false;
        lane.writerAlone = false;
        if (!ok) {
            unsend(lane, batchStart, status, sent);
        }
        if (own != nullptr && lane.failed) {
            if (lane.reading) {
                lane.readerWake->notify_one();  // it waits for this write to end (`read`)
            } else {
                settle(lane, deadline, lock);
            }
        }
        // Else what it wrote is in flight, and `own`'s caller reads next if no one does.
        if (lane.writable() && !lane.pending.empty()) {
            wakeOutside(lane.pending.front()->wake, lock);  // queued during this write
        }
    }

    /// Writes the batch; when nothing else is in flight, first connects or drops a connection
    /// the server closed while idle, and after a failure that leaves none of the batch sent
    /// and is worth it, sends it once more on a new connection. Lock not held.
    bool send(Lane& lane, std::string_view own, Deadline deadline,
              std::chrono::steady_clock::time_point now, IoStatus& status, std::size_t& sent) {
        if (lane.writerAlone) {
            if (lane.conn && lane.conn->stale(now)) {
                lane.conn.reset();  // closed by the server while idle (a restart): dropped unused
            }
            if (!lane.conn) {
                lane.conn = connect_(deadline, status);
            }
        }
        const std::array<std::string_view, 2> parts = {own, lane.others};
        while (lane.conn) {
            writes_.fetch_add(1, std::memory_order_relaxed);
            if (lane.conn->send(parts, deadline, status, sent)) {
                return true;
            }
            if (!lane.writerAlone || sent > 0 || !replaceBroken(lane, deadline, status)) {
                break;
            }  // else none of it left: it goes once more, on the new connection
        }
        return false;
    }

    /// After a failed write: the batch's requests none of whose bytes left come out of flight.
    /// When the connection broke after the server had served it (`worthReconnecting`, judged
    /// on the failure that came first), each goes once more, on a new connection. A write that
    /// timed out before any byte left leaves the connection as it was, and queues again the
    /// requests whose callers' deadlines have not passed. The others fail with the write's
    /// error; any failure but that timeout fails the connection. Lock held.
    void unsend(Lane& lane, std::uint64_t batchStart, const IoStatus& status, std::size_t sent) {
        const IoStatus& cause = lane.failed ? lane.failure : status;
        const bool again = cause.broken && lane.conn && lane.conn->answered();
        const bool stalled = sent == 0 && !status.broken && status.error == StoreError::kTimeout;
        const auto now = std::chrono::steady_clock::now();
        std::vector<Request*> resend;
        while (lane.nextSeq > batchStart && lane.nextSeq > lane.firstSeq) {
            const std::size_t i = lane.nextSeq - 1 - batchStart;
            const std::size_t begin = i == 0 ? 0 : lane.batchEnds[i - 1];
            if (sent > begin) {
                break;  // this one's bytes (and its elders') left
            }
            Request* r = lane.inFlight.back();
            lane.inFlight.pop_back();
            --lane.nextSeq;
            if (r == nullptr) {
                continue;
            }
            if ((again && !r->resent) || (stalled && now < r->deadline)) {
                r->state = State::kQueued;
                r->resent = r->resent || again;
                resend.push_back(r);
            } else {
                finish(*r, status);
            }
        }
        lane.pending.insert(lane.pending.begin(), resend.rbegin(), resend.rend());
        if (!stalled) {
            fail(lane, status);
        }
    }

    /// Reads replies until `me`'s, or until its deadline, when it gives up alone: either way
    /// `me` is done when it returns, unless the connection failed and a writer still writes on
    /// it. Called with the lock held by a caller whose request is written, on a readable lane;
    /// returns with it held.
    void read(Lane& lane, Request& me, std::unique_lock<std::mutex>& lock) {
        lane.reading = true;
        lane.readerWake = me.wake;
        RedisConnection& conn = *lane.conn;
        IoStatus status;
        while (me.state != State::kDone && !lane.failed && status.ok()) {
            lock.unlock();
            lane.replies.clear();
            for (ReplyPtr reply = conn.receive(me.deadline, status); reply != nullptr;
                 reply = conn.buffered(status)) {
                lane.replies.push_back(std::move(reply));
            }
            lock.lock();
            handOut(lane, me);
            const auto now = std::chrono::steady_clock::now();
            const bool late = now >= me.deadline;
            if (!status.ok() && !late) {
                fail(lane, status);  // a transport error, not this caller's deadline
            }
            if (status.ok() && !late && lane.writable() && !lane.pending.empty()) {
                write(lane, nullptr, me.deadline, now, lock);  // what queued while a write ran
            }
            if (lane.inFlight.empty()) {
                conn.idleFrom(now);
            }
            lock.unlock();
            for (Waker* w : lane.answered) {
                w->notify_one();
            }
            lock.lock();
        }
        if (me.state != State::kDone && !lane.failed) {
            giveUpSent(lane, me);  // its deadline passed: the next reader drops its reply
        }
        // A writer still writing on a failed connection ends soon: `fail` shut it down.
        while (lane.failed && lane.writing) {
            me.wake->wait(lock);
        }
        lane.reading = false;
        lane.readerWake = nullptr;
        settle(lane, me.deadline, lock);
    }

    /// Gives each reply read to its request's caller, in order. Lock held.
    void handOut(Lane& lane, const Request& me) {
        lane.answered.clear();
        for (ReplyPtr& reply : lane.replies) {
            if (lane.inFlight.empty()) {
                fail(lane, {StoreError::kProtocol, "a reply to no request", true});
                break;
            }
            if (closesConnection(*reply)) {
                lane.retiring = true;  // once the replies of what was written before are read
            }
            Request* r = lane.inFlight.front();
            lane.inFlight.pop_front();
            ++lane.firstSeq;
            if (r == nullptr) {
                continue;  // its caller gave up: read by no one
            }
            r->reply = std::move(reply);
            r->state = State::kDone;
            if (r != &me) {
                lane.answered.push_back(r->wake);
            }
        }
        lane.replies.clear();
    }

    /// The connection failed with `status`: it takes no more writes, and what is in flight on
    /// it is failed once neither role runs (`settle`); a role running now is cut short. Lock
    /// held.
    void fail(Lane& lane, const IoStatus& status) {
        if (lane.failed) {
            return;  // the first failure is the cause
        }
        lane.failed = true;
        lane.retiring = true;
        lane.failure = status;
        if (lane.conn && (lane.writing || lane.reading)) {
            lane.conn->interrupt();
        }
    }

    /// When no one reads: fails what is in flight on a failed connection once no one writes
    /// either, replacing the connection (at once when that is worth it: `replaceBroken`);
    /// else wakes a caller to read what is left to read; else closes a retiring connection, or
    /// one that holds only replies no one waits for (they go with it); then wakes a queued
    /// caller to write. Lock held, and let go while a new connection is made.
    void settle(Lane& lane, Deadline deadline, std::unique_lock<std::mutex>& lock) {
        if (lane.reading) {
            return;
        }
        if (lane.failed) {
            if (lane.writing) {
                return;  // the writer settles when its write ends
            }
            IoStatus status = std::move(lane.failure);
            lane.writing = true;  // holds the lane while it connects
            lane.writerAlone = true;
            lock.unlock();
            replaceBroken(lane, deadline, status);
            lock.lock();
            lane.writing = false;
            lane.writerAlone = false;
            lane.failed = false;
            lane.retiring = false;
            failInFlight(lane, status);
        } else if (Request* next = lane.firstLive(); next != nullptr) {
            wakeOutside(next->wake, lock);  // to read on
        } else if ((lane.retiring || !lane.inFlight.empty()) && !lane.writing) {
            // Retiring, or holding only replies no one waits for: a new connection serves
            // the next call, after the checks a connection with nothing in flight gets.
            lane.conn.reset();
            lane.inFlight.clear();
            lane.firstSeq = lane.nextSeq;
            lane.retiring = false;
        }
        if (lane.writable() && !lane.pending.empty()) {
            wakeOutside(lane.pending.front()->wake, lock);
        }
    }

    /// Fails every request in flight with `status`: each may have run. Lock held.
    void failInFlight(Lane& lane, const IoStatus& status) {
        IoStatus unknown = status;
        unknown.error = StoreError::kOutcomeUnknown;
        for (Request* r : lane.inFlight) {
            if (r != nullptr) {
                finish(*r, unknown);
                r->wake->notify_one();
            }
        }
        lane.inFlight.clear();
        lane.firstSeq = lane.nextSeq;
    }

    static void finish(Request& r, const IoStatus& status) {
        r.status = status;
        r.state = State::kDone;
    }

    /// Wakes `w` with the lock let go, then takes it again.
    static void wakeOutside(Waker* w, std::unique_lock<std::mutex>& lock) {
        lock.unlock();
        w->notify_one();
        lock.lock();
    }

    /// Closes the lane's connection after `status` failed it, and opens one new connection in
    /// its place when the failure is worth it (`worthReconnecting`); true when that one
    /// connected (`status.serverUp`). Called by the lane's only user.
    bool replaceBroken(Lane& lane, Deadline deadline, IoStatus& status) {
        const bool reconnect = lane.conn && worthReconnecting(status, *lane.conn);
        lane.conn.reset();
        if (reconnect) {
            IoStatus ignored;  // a failed reconnect leaves the original failure to count
            lane.conn = connect_(deadline, ignored);
            status.serverUp = lane.conn != nullptr;
        }
        return status.serverUp;
    }

    /// The caller's deadline passed before its reply came. Lock held.
    void giveUp(Lane& lane, Request& me, IoStatus& status, std::unique_lock<std::mutex>& lock) {
        if (me.state == State::kQueued) {
            lane.pending.erase(std::find(lane.pending.begin(), lane.pending.end(), &me));
            if (lane.writable() && !lane.pending.empty()) {
                lane.pending.front()->wake->notify_one();
            }
            status = {StoreError::kTimeout, "queued for a pipelined connection until the deadline"};
            return;
        }
        giveUpSent(lane, me);
        status = std::move(me.status);
        // It may have been woken to read on, or been the last live request of a retiring
        // connection.
        settle(lane, me.deadline, lock);
    }

    /// A written request's caller gives up: whoever reads next reads its reply and drops it.
    /// Lock held.
    static void giveUpSent(Lane& lane, Request& me) {
        lane.inFlight[me.seq - lane.firstSeq] = nullptr;
        finish(me, {StoreError::kOutcomeUnknown, "no reply within the deadline"});
    }

    const std::size_t maxLanes_;
    const std::size_t maxBatch_;
    const Connector connect_;
    std::atomic<std::uint64_t>& writes_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<Lane>> lanes_;       // guarded by mutex_
    std::vector<std::unique_ptr<Waker>> allWakers_;  // guarded by mutex_; one per caller at most
    std::vector<Waker*> wakers_;                     // guarded by mutex_; those lent to no call
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
