#pragma once

#include <arpa/inet.h>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <span>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/redis_options.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

using Deadline = std::chrono::steady_clock::time_point;

/// One address the server may listen at.
struct RedisAddress {
    sockaddr_storage address{};
    socklen_t length = 0;
    bool tcp = false;
};

/// The outcome of one transport step.
struct IoStatus {
    StoreError error = StoreError::kNone;
    std::string message;
    /// The connection broke (the server closed or reset it), as opposed to a timeout.
    bool broken = false;
    /// A new connection reached the server right after this one broke: the failure was the
    /// connection's, not the server's, and does not count toward the circuit breaker.
    bool serverUp = false;
    [[nodiscard]] bool ok() const noexcept { return error == StoreError::kNone; }
};

/// An integer's decimal digits, formatted in place: the lengths and numbers a request carries
/// need no string of their own, so building one allocates only the request (every check on
/// Redis builds one).
class DecimalText {
public:
    static constexpr std::size_t kMaxChars = 20;  ///< a sign and 19 digits, or 20 digits

    /// The digits are written first (they are declared first), then their count kept.
    template <std::integral T>
    explicit DecimalText(T v) noexcept : size_(write(digits_, v)) {
        static_assert(sizeof(T) <= sizeof(std::uint64_t), "kMaxChars holds 64-bit values");
    }

    [[nodiscard]] std::string_view view() const noexcept { return {digits_.data(), size_}; }

private:
    template <std::integral T>
    static std::size_t write(std::array<char, kMaxChars>& digits, T v) noexcept {
        return static_cast<std::size_t>(
            std::to_chars(digits.data(), digits.data() + digits.size(), v).ptr - digits.data());
    }

    std::array<char, kMaxChars> digits_{};
    std::size_t size_;
};

/// Appends the header of a RESP command of `arguments` arguments; `appendArgument` then appends
/// each. Binary-safe: every argument goes with its length, so keys may hold any byte and never
/// pass through a format string.
inline void appendCommandHeader(std::string& out, std::size_t arguments) {
    out.push_back('*');
    out.append(DecimalText(arguments).view()).append("\r\n");
}

inline void appendArgument(std::string& out, std::string_view argument) {
    out.push_back('$');
    out.append(DecimalText(argument.size()).view()).append("\r\n");
    out.append(argument).append("\r\n");
}

/// The most bytes `appendArgument` adds to an argument's own: `$`, its length's digits, and
/// two line ends.
inline constexpr std::size_t kArgumentFraming = 1 + DecimalText::kMaxChars + 4;

/// Appends one command in RESP.
inline void appendCommand(std::string& out, std::initializer_list<std::string_view> args) {
    appendCommandHeader(out, args.size());
    for (const std::string_view a : args) {
        appendArgument(out, a);
    }
}

struct ReplyDeleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

/// The error kind of a Redis error reply.
inline StoreError classifyErrorReply(std::string_view text) {
    const auto startsWith = [&](std::string_view p) { return text.substr(0, p.size()) == p; };
    // Redis refuses a long command from an unauthenticated client this way, then hangs up.
    if (startsWith("ERR Protocol error")) {
        return text.find("unauthenticated") != std::string_view::npos ? StoreError::kAuth
                                                                      : StoreError::kProtocol;
    }
    if (startsWith("OOM")) {
        return StoreError::kOutOfMemory;
    }
    if (startsWith("MOVED") || startsWith("ASK")) {
        return StoreError::kRedirected;
    }
    if (startsWith("NOAUTH") || startsWith("WRONGPASS")) {
        return StoreError::kAuth;
    }
    if (startsWith("BUSY")) {
        return StoreError::kBusy;
    }
    if (startsWith("CLUSTERDOWN") || startsWith("TRYAGAIN")) {
        return StoreError::kClusterDown;
    }
    // Refusals of a server that is up, also raised inside a script: Redis 7 passes the code
    // through, earlier versions wrap it in their own text.
    const auto holds = [&](std::string_view code) {
        return text.find(code) != std::string_view::npos;
    };
    if (holds("OOM command not allowed")) {
        return StoreError::kOutOfMemory;
    }
    if (holds("READONLY")) {
        return StoreError::kReadOnly;
    }
    if (holds("NOPERM")) {
        return StoreError::kNoPermission;
    }
    if (holds("MISCONF")) {
        return StoreError::kMisconf;
    }
    return StoreError::kScript;
}

/// Errors that say the server or the link is unusable (they trip the breaker, unless a new
/// connection showed the server up: `outage`); the others are a server's answer to one request
/// (out of memory, read-only, no permission, misconf, a script error, a redirect) and leave it
/// closed.
inline bool tripsBreaker(StoreError e) {
    switch (e) {
        case StoreError::kTimeout:
        case StoreError::kOutcomeUnknown:
        case StoreError::kUnreachable:
        case StoreError::kClosed:
        case StoreError::kProtocol:
        case StoreError::kAuth:
        case StoreError::kBusy:
            return true;
        default:
            return false;
    }
}

/// Whether a failure counts toward the breaker: an error that trips it, unless a new connection
/// reached the server right after the one that broke.
inline bool outage(const IoStatus& status) {
    return tripsBreaker(status.error) && !status.serverUp;
}

/// Waits `pause` in the calling thread (`poll` on no descriptors: no <thread> for one sleep).
/// A signal may end it early, which only retries sooner.
inline void pauseFor(std::chrono::milliseconds pause) {
    (void)::poll(nullptr, 0, static_cast<int>(pause.count()));
}

/// An error reply that says the link itself is unusable (auth lost, protocol error, a busy
/// server): the connection that carried it is closed once its replies are read.
inline bool closesConnection(const redisReply& reply) {
    return reply.type == REDIS_REPLY_ERROR &&
           tripsBreaker(classifyErrorReply(std::string_view(reply.str, reply.len)));
}

/// One connection to Redis: our own socket (every wait bounded by the call's deadline, writes
/// that never block, with MSG_NOSIGNAL so no SIGPIPE is ever raised) and hiredis's reply
/// parser. A connection that saw an I/O error is dropped by its owner, never reused; so is one
/// whose call timed out, unless its owner keeps the late reply's place in the order of replies
/// (a pipeline): it would otherwise be read as the next caller's.
/// Thread safety: not thread-safe, except that one thread may send while another receives
/// (a pipeline's writer and reader), and `interrupt` may be called from any thread.
class RedisConnection {
public:
    RedisConnection(const RedisConnection&) = delete;
    RedisConnection& operator=(const RedisConnection&) = delete;
    RedisConnection(RedisConnection&&) = delete;
    RedisConnection& operator=(RedisConnection&&) = delete;
    ~RedisConnection() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        if (reader_ != nullptr) {
            redisReaderFree(reader_);
        }
    }

    /// Connects within the deadline; null with `status` set on failure.
    static std::unique_ptr<RedisConnection> open(const RedisAddress& addr, Deadline deadline,
                                                 IoStatus& status) {
        std::unique_ptr<RedisConnection> c(new RedisConnection());
        c->fd_ = ::socket(addr.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        c->reader_ = redisReaderCreate();
        if (c->fd_ < 0 || c->reader_ == nullptr) {
            status = {StoreError::kUnreachable, errorText("socket", errno)};
            return nullptr;
        }
        if (addr.tcp) {
            const int one = 1;
            ::setsockopt(c->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API's type
        if (::connect(c->fd_, reinterpret_cast<const sockaddr*>(&addr.address), addr.length) != 0) {
            if (errno != EINPROGRESS && errno != EAGAIN) {
                status = {StoreError::kUnreachable, errorText("connect", errno)};
                return nullptr;
            }
            if (!c->waitFor(POLLOUT, deadline)) {
                status = {StoreError::kTimeout, "connect timed out"};
                return nullptr;
            }
            int err = 0;
            socklen_t len = sizeof err;
            ::getsockopt(c->fd_, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err != 0) {
                status = {StoreError::kUnreachable, errorText("connect", err)};
                return nullptr;
            }
        }
        c->blockingReads_ = c->enableBlockingReads();
        return c;
    }

    /// Sends `request` and reads one reply, within the deadline. `status` tells whether the
    /// request may have run (kOutcomeUnknown) when no reply came.
    ReplyPtr roundTrip(std::string_view request, Deadline deadline, IoStatus& status) {
        std::size_t sent = 0;
        if (!send(std::span<const std::string_view>(&request, 1), deadline, status, sent)) {
            return nullptr;
        }
        return receive(deadline, status);
    }

    /// Writes `parts` back to back (one `sendmsg` when the socket takes them all), within the
    /// deadline. `sent` counts the bytes that left, also on failure: once any byte of a
    /// request left, the server may run it.
    bool send(std::span<const std::string_view> parts, Deadline deadline, IoStatus& status,
              std::size_t& sent) {
        std::size_t total = 0;
        for (const std::string_view part : parts) {
            total += part.size();
        }
        sent = 0;
        while (sent < total) {
            Unsent unsent(parts, sent);
            msghdr message{};
            message.msg_iov = unsent.vec.data();
            message.msg_iovlen = unsent.used;
            const ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                sent += static_cast<std::size_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR) {
                continue;
            }
            // Once any byte left, the server may run the command.
            if (n < 0 && (wouldBlock(errno))) {
                if (!waitFor(POLLOUT, deadline)) {
                    status = {sent == 0 ? StoreError::kTimeout : StoreError::kOutcomeUnknown,
                              "send timed out"};
                    return false;
                }
                continue;
            }
            status = {sent == 0 ? StoreError::kClosed : StoreError::kOutcomeUnknown,
                      errorText("send", errno), true};
            return false;
        }
        return true;
    }

    /// The next reply if it is already read in full, without a system call; null otherwise
    /// (`status` tells an unparsable one).
    ReplyPtr buffered(IoStatus& status) {
        void* reply = nullptr;
        if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
            status = {StoreError::kProtocol, "unparsable reply"};
            return nullptr;
        }
        if (reply != nullptr) {
            answered_.store(true, std::memory_order_relaxed);
        }
        return ReplyPtr(static_cast<redisReply*>(reply));
    }

    /// Reads the next reply, within the deadline; replies come in the order of the requests.
    ReplyPtr receive(Deadline deadline, IoStatus& status) {
        for (;;) {
            void* reply = nullptr;
            if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
                status = {StoreError::kProtocol, "unparsable reply"};
                return nullptr;
            }
            if (reply != nullptr) {
                answered_.store(true, std::memory_order_relaxed);
                return ReplyPtr(static_cast<redisReply*>(reply));
            }
            std::array<char, 16384> buffer;  // NOLINT(cppcoreguidelines-pro-type-member-init)
            bool late = false;
            const ssize_t n = recvWithin(deadline, buffer, late);
            if (late) {
                status = {StoreError::kOutcomeUnknown, "no reply within the deadline"};
                return nullptr;
            }
            if (n > 0) {
                redisReaderFeed(reader_, buffer.data(), static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && (errno == EINTR || wouldBlock(errno))) {
                continue;
            }
            status = {
                StoreError::kOutcomeUnknown,
                n == 0 ? std::string("connection closed by the server") : errorText("recv", errno),
                true};
            return nullptr;
        }
    }

    /// An idle connection is never readable: if it is, the server closed it (a restart) or
    /// sent something unasked, and it must not carry a request. Only a connection idle for
    /// `kStaleCheckAfter` or more is polled: the check is a system call, and a server that
    /// closes a connection within that time of its last reply costs that one call (reported
    /// as a failure, never a wrong answer).
    [[nodiscard]] bool stale(std::chrono::steady_clock::time_point now) const noexcept {
        if (now - idleSince_ < kStaleCheckAfter) {
            return false;
        }
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) != 0;
    }

    /// It has carried a reply: the server accepted and served it.
    [[nodiscard]] bool answered() const noexcept {
        return answered_.load(std::memory_order_relaxed);
    }

    /// Ends every wait on the connection at once, in both directions, from any thread: a
    /// pipeline's writer and reader use it at the same time, and one that finds it failed cuts
    /// the other's wait short. The descriptor stays open until the connection is destroyed.
    void interrupt() const noexcept { ::shutdown(fd_, SHUT_RDWR); }

    /// Marks the end of a use: the time `stale()` measures idleness from.
    void idleFrom(std::chrono::steady_clock::time_point now) noexcept { idleSince_ = now; }

    static constexpr std::chrono::milliseconds kStaleCheckAfter{1};

private:
    RedisConnection() = default;

    /// "<what>: <the system's text for err>".
    static std::string errorText(std::string_view what, int err) {
        constexpr std::size_t kLength = 128;
        std::array<char, kLength> buffer{};
        // GNU strerror_r may return a static string instead of filling the buffer.
        const char* const text = ::strerror_r(err, buffer.data(), buffer.size());
        return std::string(what).append(": ").append(text);
    }

    /// The parts not yet written, the first one from where the last write stopped.
    struct Unsent {
        static constexpr std::size_t kMaxParts = 8;
        std::array<iovec, kMaxParts> vec{};
        std::size_t used = 0;

        Unsent(std::span<const std::string_view> parts, std::size_t sent) {
            for (const std::string_view part : parts) {
                if (sent >= part.size()) {
                    sent -= part.size();
                    continue;
                }
                if (used == kMaxParts) {
                    break;
                }
                const std::string_view rest = part.substr(sent);
                // iovec's base is non-const by POSIX; sendmsg only reads it.
                // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
                vec.at(used).iov_base = const_cast<char*>(rest.data());
                vec.at(used).iov_len = rest.size();
                sent = 0;
                ++used;
            }
        }
    };

    static bool wouldBlock(int err) noexcept {
#if EAGAIN == EWOULDBLOCK
        return err == EAGAIN;
#else
        return err == EAGAIN || err == EWOULDBLOCK;
#endif
    }

    /// The receive timeout a blocking `recv` is given, and how far off a deadline must be for a
    /// read to block: the kernel rounds the timeout up to its ticks and may end it a tick late
    /// (10–20 ms at 100 Hz, the coarsest common setting; 8–12 ms at 250 Hz), so a blocking read
    /// still ends before such a deadline. A nearer deadline is waited for by `poll`, to the
    /// millisecond.
    static constexpr std::chrono::milliseconds kReadSlice{5};
    static constexpr std::chrono::milliseconds kBlockingReadMargin{25};

    /// Makes reads block, each for at most `kReadSlice` and the kernel's rounding of it (writes
    /// never block: MSG_DONTWAIT); false, the socket left non-blocking, where the system
    /// refuses either.
    [[nodiscard]] bool enableBlockingReads() const noexcept {
        timeval slice{};
        slice.tv_usec = std::chrono::microseconds(kReadSlice).count();
        const int flags = ::fcntl(fd_, F_GETFL);
        return flags >= 0 &&
               ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice) == 0 &&
               ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) == 0;
    }

    /// Reads what the server sent into `buffer`, waiting for it within the deadline: where the
    /// deadline is `kBlockingReadMargin` or more off, one `recv` that blocks until bytes come
    /// (or the receive timeout passes: EAGAIN, and the caller asks again), so a check's reply
    /// costs one system call, as a blocking hiredis context's does; otherwise a `poll` to the
    /// deadline, then a `recv` that does not wait. Returns `recv`'s result, or sets `late` when
    /// the deadline passed with nothing to read.
    ssize_t recvWithin(Deadline deadline, std::span<char> buffer, bool& late) const {
        if (blockingReads_ && deadline - std::chrono::steady_clock::now() >= kBlockingReadMargin) {
            return ::recv(fd_, buffer.data(), buffer.size(), 0);
        }
        // Wait first: right after a write the reply is rarely there yet, and a recv that
        // finds nothing is one system call more per check.
        if (!waitFor(POLLIN, deadline)) {
            late = true;
            return -1;
        }
        return ::recv(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT);
    }

    [[nodiscard]] bool waitFor(short events, Deadline deadline) const {
        for (;;) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                return false;
            }
            pollfd p{fd_, events, 0};
            const int n = ::poll(&p, 1, static_cast<int>(left.count()));
            if (n > 0) {
                return true;  // ready, or an error the next send/recv reports
            }
            if (n < 0 && errno != EINTR) {
                return false;
            }
        }
    }

    int fd_ = -1;
    bool blockingReads_ = false;  // reads block a slice at a time (enableBlockingReads)
    redisReader* reader_ = nullptr;
    std::atomic<bool> answered_{false};                  // set by a reader, read by a writer
    std::chrono::steady_clock::time_point idleSince_{};  // the epoch: a new connection is checked
};

/// Whether `status`, a failure of `conn`, is worth one new connection before it counts toward
/// the breaker (docs/redis.md, A request is sent once): `conn` broke after the server had
/// served it, as when the server closes a connection (CLIENT KILL, an idle timeout) while
/// others stay up. If the new connection connects within the call's deadline, the server is
/// up (`IoStatus::serverUp`), and a request none of whose bytes left `conn` goes once more on
/// it: it cannot have run. A request whose bytes left may have run and is never sent again. A
/// new connection that breaks before serving anything is news about the server: it counts.
inline bool worthReconnecting(const IoStatus& status, const RedisConnection& conn) {
    return status.broken && conn.answered();
}

/// The addresses of `host` (a name, or an address in text) at `port`, in the resolver's order;
/// empty with `error` set when it has none. `numericOnly`: `host` must be an address.
inline std::vector<RedisAddress> lookUp(const std::string& host, int port, bool numericOnly,
                                        std::string& error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (numericOnly ? AI_NUMERICHOST : 0);
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    std::vector<RedisAddress> out;
    if (rc != 0) {
        error = "cannot resolve " + host + ": " + ::gai_strerror(rc);
        return out;
    }
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        RedisAddress address;
        std::memcpy(&address.address, a->ai_addr, a->ai_addrlen);
        address.length = a->ai_addrlen;
        address.tcp = true;
        out.push_back(address);
    }
    ::freeaddrinfo(found);
    return out;
}

/// Where the server listens: a unix socket path, or a host and port looked up when a
/// connection is made, never at construction: at the first connect, and again at the first
/// after a connect failed, so a server whose name moves to another address (a managed
/// endpoint's failover) is followed. A lookup that fails keeps the addresses known before.
/// One process's (`RedisLink`): a forked child never waits for a lookup its parent's thread
/// had under way.
/// Thread safety: thread-safe; one caller looks up at a time, the others wait for it within
/// their deadlines.
class RedisEndpoint {
public:
    /// The storage's server (`host`, `port`, or `unixSocket`). `options` are the storage's,
    /// which outlive the endpoint.
    explicit RedisEndpoint(const RedisStorageOptions& options)
        : RedisEndpoint(options, options.host, options.port) {}

    /// A Cluster node's: `host` and `port` over TCP, looked up with the storage's resolver.
    RedisEndpoint(const RedisStorageOptions& options, std::string host, int port)
        : options_(options), host_(std::move(host)), port_(port) {}

    /// `host:port` (`[host]:port` for an IPv6 address), or the unix socket path.
    [[nodiscard]] std::string name() const {
        if (!options_.unixSocket.empty()) {
            return options_.unixSocket;
        }
        const bool v6 = host_.find(':') != std::string::npos;
        return (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
    }

    [[nodiscard]] const std::string& host() const noexcept { return host_; }
    [[nodiscard]] int port() const noexcept { return port_; }

    /// The addresses to try, in order; empty with `status` set when none is known in time.
    /// The lookup runs outside the lock: a caller that finds one under way waits for it
    /// within its deadline, then takes the addresses known before, if any.
    std::vector<RedisAddress> addresses(Deadline deadline, IoStatus& status) {
        if (!options_.unixSocket.empty()) {
            return {unixAddress()};
        }
        std::unique_lock<std::mutex> lock(lock_);
        while (lookingUp_) {
            if (looked_.wait_until(lock, deadline) == std::cv_status::timeout) {
                if (known_.empty()) {
                    status = {StoreError::kTimeout,
                              "looking up " + host_ + " took until the deadline"};
                }
                return known_;
            }
        }
        if (!stale_) {
            return known_;
        }
        lookingUp_ = true;
        lock.unlock();
        std::string error;
        std::vector<RedisAddress> found;
        try {
            found = lookUpNow(error);
        } catch (...) {  // std::bad_alloc: the next caller looks up again
            lock.lock();
            lookingUp_ = false;
            looked_.notify_all();
            throw;
        }
        lock.lock();
        lookingUp_ = false;
        looked_.notify_all();
        if (!found.empty()) {
            known_ = std::move(found);
            stale_ = false;
        } else if (known_.empty()) {
            status = {StoreError::kUnreachable, error};
        }
        return known_;
    }

    /// After a connect to every known address failed: the next connect looks the host up
    /// again. The lock is never held across a lookup, so this never waits for one.
    void forget() {
        const std::lock_guard<std::mutex> lock(lock_);
        stale_ = true;
    }

private:
    [[nodiscard]] RedisAddress unixAddress() const {
        sockaddr_un un{};
        un.sun_family = AF_UNIX;
        // The path's length is checked at construction.
        std::memcpy(&un.sun_path[0], options_.unixSocket.data(), options_.unixSocket.size());
        RedisAddress out;
        std::memcpy(&out.address, &un, sizeof un);
        out.length = sizeof un;
        return out;
    }

    /// The addresses of the host now: the options' resolver's, or the system's.
    [[nodiscard]] std::vector<RedisAddress> lookUpNow(std::string& error) const {
        if (!options_.resolve) {
            return lookUp(host_, port_, false, error);
        }
        std::vector<RedisAddress> out;
        std::vector<std::string> texts;
        try {
            texts = options_.resolve(host_);
        } catch (...) {  // documented not to throw; a lookup that fails all the same
            error = "cannot resolve " + host_ + ": the resolver threw";
            return out;
        }
        for (const std::string& text : texts) {
            for (const RedisAddress& a : lookUp(text, port_, true, error)) {
                out.push_back(a);
            }
        }
        if (out.empty() && error.empty()) {
            error = "cannot resolve " + host_ + ": the resolver found no address";
        }
        return out;
    }

    const RedisStorageOptions& options_;
    const std::string host_;
    const int port_;
    std::mutex lock_;
    std::condition_variable looked_;   // a lookup ended
    std::vector<RedisAddress> known_;  // guarded by lock_
    bool stale_ = true;                // guarded by lock_
    bool lookingUp_ = false;           // guarded by lock_
};

/// A new connection to the first of the endpoint's addresses that takes one within the
/// deadline; null with `status` set (the last address's failure) when none does, and the
/// endpoint then looks its host up again at the next connect.
inline std::unique_ptr<RedisConnection> connectTo(RedisEndpoint& endpoint, Deadline deadline,
                                                  IoStatus& status) {
    const std::vector<RedisAddress> addresses = endpoint.addresses(deadline, status);
    if (addresses.empty()) {
        return nullptr;
    }
    for (const RedisAddress& address : addresses) {
        if (auto c = RedisConnection::open(address, deadline, status)) {
            return c;
        }
        if (status.error == StoreError::kTimeout) {
            break;  // the deadline passed: no time for the next
        }
    }
    endpoint.forget();
    return nullptr;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
