#pragma once

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

using Deadline = std::chrono::steady_clock::time_point;

/// Where the server listens, resolved once at construction.
struct RedisAddress {
    sockaddr_storage address{};
    socklen_t length = 0;
    bool tcp = false;
    std::string error;  ///< why resolution failed; every connect then reports kUnreachable
};

/// The outcome of one transport step.
struct IoStatus {
    StoreError error = StoreError::kNone;
    std::string message;
    [[nodiscard]] bool ok() const noexcept { return error == StoreError::kNone; }
};

/// Appends one command in RESP, binary-safe: every argument goes with its length, so keys may
/// hold any byte and never pass through a format string.
inline void appendCommand(std::string& out, std::initializer_list<std::string_view> args) {
    out.push_back('*');
    out.append(std::to_string(args.size())).append("\r\n");
    for (const std::string_view a : args) {
        out.push_back('$');
        out.append(std::to_string(a.size())).append("\r\n");
        out.append(a).append("\r\n");
    }
}

struct ReplyDeleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

/// One connection to Redis: our own non-blocking socket (every wait bounded by the call's
/// deadline, writes with MSG_NOSIGNAL so no SIGPIPE is ever raised) and hiredis's reply
/// parser. A connection that saw any error is dropped by its owner, never reused: a late
/// reply would otherwise be read as the next caller's.
/// Thread safety: not thread-safe; the pool hands it to one caller at a time.
class RedisConnection {
public:
    RedisConnection(const RedisConnection&) = delete;
    RedisConnection& operator=(const RedisConnection&) = delete;
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
        if (!addr.error.empty()) {
            status = {StoreError::kUnreachable, addr.error};
            return nullptr;
        }
        std::unique_ptr<RedisConnection> c(new RedisConnection());
        c->fd_ = ::socket(addr.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        c->reader_ = redisReaderCreate();
        if (c->fd_ < 0 || c->reader_ == nullptr) {
            status = {StoreError::kUnreachable, "socket: " + errorText(errno)};
            return nullptr;
        }
        if (addr.tcp) {
            const int one = 1;
            ::setsockopt(c->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        if (::connect(c->fd_, reinterpret_cast<const sockaddr*>(&addr.address), addr.length) != 0) {
            if (errno != EINPROGRESS && errno != EAGAIN) {
                status = {StoreError::kUnreachable, "connect: " + errorText(errno)};
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
                status = {StoreError::kUnreachable, "connect: " + errorText(err)};
                return nullptr;
            }
        }
        return c;
    }

    /// Sends `request` and reads one reply, within the deadline. `status` tells whether the
    /// request may have run (kOutcomeUnknown) when no reply came.
    ReplyPtr roundTrip(std::string_view request, Deadline deadline, IoStatus& status) {
        if (!send(request, deadline, status)) {
            return nullptr;
        }
        return receive(deadline, status);
    }

    [[nodiscard]] pid_t owner() const noexcept { return pid_; }

    /// An idle connection is never readable: if it is, the server closed it (a restart) or
    /// sent something unasked, and it must not carry a request.
    [[nodiscard]] bool stale() const noexcept {
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) != 0;
    }

private:
    RedisConnection() = default;

    static std::string errorText(int err) {
        char buffer[128] = {};
        // GNU strerror_r may return a static string instead of filling the buffer.
        const auto text = ::strerror_r(err, buffer, sizeof buffer);
        return std::string(text);
    }

    static bool wouldBlock(int err) noexcept {
#if EAGAIN == EWOULDBLOCK
        return err == EAGAIN;
#else
        return err == EAGAIN || err == EWOULDBLOCK;
#endif
    }

    bool waitFor(short events, Deadline deadline) const {
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

    bool send(std::string_view request, Deadline deadline, IoStatus& status) {
        std::size_t sent = 0;
        while (sent < request.size()) {
            const ssize_t n =
                ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
            if (n > 0) {
                sent += static_cast<std::size_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR) {
                continue;
            }
            // Once any byte left, the server may run the command.
            const StoreError unsent =
                sent == 0 ? StoreError::kTimeout : StoreError::kOutcomeUnknown;
            if (n < 0 && (wouldBlock(errno))) {
                if (!waitFor(POLLOUT, deadline)) {
                    status = {unsent, "send timed out"};
                    return false;
                }
                continue;
            }
            status = {sent == 0 ? StoreError::kClosed : StoreError::kOutcomeUnknown,
                      "send: " + errorText(errno)};
            return false;
        }
        return true;
    }

    ReplyPtr receive(Deadline deadline, IoStatus& status) {
        char buffer[16384];
        for (;;) {
            void* reply = nullptr;
            if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
                status = {StoreError::kProtocol, "unparsable reply"};
                return nullptr;
            }
            if (reply != nullptr) {
                return ReplyPtr(static_cast<redisReply*>(reply));
            }
            const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
            if (n > 0) {
                redisReaderFeed(reader_, buffer, static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0 && (wouldBlock(errno))) {
                if (!waitFor(POLLIN, deadline)) {
                    status = {StoreError::kOutcomeUnknown, "no reply within the deadline"};
                    return nullptr;
                }
                continue;
            }
            status = {StoreError::kOutcomeUnknown,
                      n == 0 ? std::string("connection closed by the server")
                             : "recv: " + errorText(errno)};
            return nullptr;
        }
    }

    int fd_ = -1;
    redisReader* reader_ = nullptr;
    pid_t pid_ = ::getpid();
};

/// Resolves a TCP host and port or a unix socket path, without connecting.
inline RedisAddress resolveRedisAddress(const std::string& host, int port,
                                        const std::string& unixSocket) {
    RedisAddress out;
    if (!unixSocket.empty()) {
        sockaddr_un un{};
        un.sun_family = AF_UNIX;
        if (unixSocket.size() >= sizeof un.sun_path) {
            out.error = "unix socket path too long";
            return out;
        }
        std::memcpy(un.sun_path, unixSocket.data(), unixSocket.size());
        std::memcpy(&out.address, &un, sizeof un);
        out.length = sizeof un;
        return out;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    if (rc != 0 || found == nullptr) {
        out.error = "cannot resolve " + host + ": " + ::gai_strerror(rc);
        return out;
    }
    std::memcpy(&out.address, found->ai_addr, found->ai_addrlen);
    out.length = found->ai_addrlen;
    out.tcp = true;
    ::freeaddrinfo(found);
    return out;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
