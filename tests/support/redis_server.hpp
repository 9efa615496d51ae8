#pragma once

// A redis-server of the test's own: started with posix_spawn (never fork from a threaded test),
// listening on a unix socket in a fresh temporary directory (default) or on a free loopback TCP
// port, persistence off, stopped and cleaned up by the destructor.
//
//   ratelimit_test::RedisServer server;                       // unix socket
//   ratelimit_test::RedisServer tcp{{.tcp = true, .extraArgs = {"--requirepass", "pw"}}};
//   ratelimit_test::RedisContextPtr c{server.connect()};
//
// The binary is $RATELIMIT_REDIS_SERVER, else `redis-server` on PATH. When it is missing the
// constructor throws `RedisUnavailable` (tests turn it into a skip/warning), except under
// CI=true, where it throws std::runtime_error so that the run fails.
//
// Thread safety: not thread-safe; one test drives one server. Copies are not allowed.

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <netinet/in.h>
#include <optional>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

// NOLINTNEXTLINE(readability-redundant-declaration): <unistd.h> declares it only with _GNU_SOURCE
extern char** environ;

namespace ratelimit_test {

/// No redis-server binary on this machine (and not in CI): the test should skip.
class RedisUnavailable : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct RedisContextDeleter {
    void operator()(redisContext* c) const noexcept {
        if (c != nullptr) {
            redisFree(c);
        }
    }
};
using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;

struct RedisReplyDeleter {
    void operator()(redisReply* r) const noexcept {
        if (r != nullptr) {
            freeReplyObject(r);
        }
    }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

/// Sends one command with binary-safe arguments (`redisCommandArgv`) and returns its reply
/// (null when the connection failed; `c->errstr` says why).
inline RedisReplyPtr command(redisContext* c, const std::vector<std::string_view>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    argv.reserve(args.size());
    lengths.reserve(args.size());
    for (const std::string_view a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
    }
    return RedisReplyPtr{static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()))};
}

/// Queues one command for a pipeline; read the replies with `reply(c)` in order.
inline void appendCommand(redisContext* c, const std::vector<std::string_view>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const std::string_view a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()) !=
        REDIS_OK) {
        throw std::runtime_error(std::string("redisAppendCommandArgv: ") +
                                 static_cast<const char*>(c->errstr));
    }
}

/// The next reply of a pipeline (null when the connection failed).
inline RedisReplyPtr reply(redisContext* c) {
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK) {
        return RedisReplyPtr{};
    }
    return RedisReplyPtr{static_cast<redisReply*>(r)};
}

/// Starts the program `args[0]` with `args` and `actions` (posix_spawn, never fork: safe in a
/// threaded test) and sets `pid`; returns posix_spawn's error number (0: started). The child
/// starts with no blocked signals and default handlers for the ones a test runner may have
/// changed, whatever the calling thread's state.
inline int spawnProcess(std::vector<std::string> args, const posix_spawn_file_actions_t& actions,
                        pid_t& pid) {
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (const int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
        sigaddset(&defaults, sig);
    }
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    return rc;
}

class RedisServer {
public:
    struct Options {
        /// Listen on 127.0.0.1 at a free port instead of a unix socket.
        bool tcp = false;
        /// Appended to the command line, e.g. {"--requirepass", "pw", "--maxmemory", "2mb"}.
        std::vector<std::string> extraArgs = {};
        /// How long `start`/`restart` wait for the server to answer PING.
        std::chrono::milliseconds startTimeout{5000};
        /// How long `stop` waits after SIGTERM before it sends SIGKILL.
        std::chrono::milliseconds stopTimeout{5000};
        /// With `tcp`: the loopback address to listen on (any of 127.0.0.0/8).
        std::string bind = "127.0.0.1";
        /// With `tcp`: the port; 0 picks a free one.
        int port = 0;
    };

    RedisServer() : RedisServer(Options{}) {}

    /// Starts the server and waits until it answers PING.
    /// Throws: `RedisUnavailable` when there is no redis-server binary (std::runtime_error
    /// instead when CI=true); std::runtime_error when it does not start.
    explicit RedisServer(Options options) : options_(std::move(options)) {
        binary_ = findBinary();
        dir_ = makeTempDir();
        try {
            if (options_.tcp && options_.port != 0) {
                port_ = options_.port;
                start();
            } else if (options_.tcp) {
                startOnFreePort();
            } else {
                socket_ = dir_ + "/redis.sock";
                start();
            }
        } catch (...) {
            removeDir();
            throw;
        }
    }

    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;
    RedisServer(RedisServer&&) = delete;
    RedisServer& operator=(RedisServer&&) = delete;

    ~RedisServer() {
        try {
            stop();
        } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
        }
        removeDir();
    }

    /// SIGTERM, then SIGKILL after `stopTimeout`; waits for the process. No-op when stopped.
    void stop() {
        if (pid_ <= 0) {
            return;
        }
        ::kill(pid_, SIGTERM);
        ::kill(pid_, SIGCONT);  // a paused server must run to handle SIGTERM
        const auto deadline = std::chrono::steady_clock::now() + options_.stopTimeout;
        while (!reaped(false)) {
            if (std::chrono::steady_clock::now() >= deadline) {
                ::kill(pid_, SIGKILL);
                reaped(true);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }

    /// SIGKILL: the server dies at once, as in a crash. Waits for the process.
    void kill() {
        if (pid_ <= 0) {
            return;
        }
        ::kill(pid_, SIGKILL);
        reaped(true);
    }

    /// Stops the server if it runs and starts a new one on the same socket or port (empty:
    /// persistence is off).
    void restart() {
        stop();
        start();
    }

    /// SIGSTOP: the server stops answering (requests time out) until `resume()`.
    void pause() const {
        if (pid_ > 0) {
            ::kill(pid_, SIGSTOP);
        }
    }

    /// SIGCONT after `pause()`.
    void resume() const {
        if (pid_ > 0) {
            ::kill(pid_, SIGCONT);
        }
    }

    [[nodiscard]] bool running() const noexcept { return pid_ > 0; }
    [[nodiscard]] pid_t pid() const noexcept { return pid_; }
    /// The unix socket path; empty in TCP mode.
    [[nodiscard]] const std::string& unixSocket() const noexcept { return socket_; }
    /// The TCP port; 0 in unix-socket mode.
    [[nodiscard]] int port() const noexcept { return port_; }
    [[nodiscard]] const std::string& directory() const noexcept { return dir_; }

    /// A new raw hiredis connection (no AUTH), with `timeout` for connect and for each command;
    /// the caller frees it (`RedisContextPtr`). Returns null only when hiredis cannot allocate;
    /// check `c->err` for connection errors.
    [[nodiscard]] redisContext* connect(
        std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) const {
        const timeval tv = toTimeval(timeout);
        redisContext* c = socket_.empty()
                              ? redisConnectWithTimeout(options_.bind.c_str(), port_, tv)
                              : redisConnectUnixWithTimeout(socket_.c_str(), tv);
        if (c != nullptr && c->err == 0) {
            redisSetTimeout(c, tv);
        }
        return c;
    }

    /// The server's log so far (stdout and stderr), for failure messages.
    [[nodiscard]] std::string log() const {
        std::ifstream in(dir_ + "/redis.log", std::ios::binary);
        std::string out;
        std::vector<char> chunk(4096);
        while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) ||
               in.gcount() > 0) {
            out.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
        }
        return out;
    }

private:
    static timeval toTimeval(std::chrono::milliseconds d) {
        timeval tv{};
        tv.tv_sec = d.count() / 1000;
        tv.tv_usec = (d.count() % 1000) * 1000;
        return tv;
    }

    static bool ciRun() {
        // NOLINTNEXTLINE(concurrency-mt-unsafe): single-threaded test setup; nothing calls setenv
        const char* ci = std::getenv("CI");
        return ci != nullptr && std::string_view(ci) == "true";
    }

    static std::string findBinary() {
        // NOLINTNEXTLINE(concurrency-mt-unsafe): single-threaded test setup; nothing calls setenv
        if (const char* env = std::getenv("RATELIMIT_REDIS_SERVER");
            env != nullptr && *env != '\0') {
            if (::access(env, X_OK) == 0) {
                return env;
            }
            unavailable(std::string("RATELIMIT_REDIS_SERVER=") + env + " is not executable");
        }
        // NOLINTNEXTLINE(concurrency-mt-unsafe): single-threaded test setup; nothing calls setenv
        const char* path = std::getenv("PATH");
        std::string_view rest = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
        while (true) {
            const std::size_t colon = rest.find(':');
            const std::string_view dir = rest.substr(0, colon);
            if (!dir.empty()) {
                std::string candidate = std::string(dir) + "/redis-server";
                if (::access(candidate.c_str(), X_OK) == 0) {
                    return candidate;
                }
            }
            if (colon == std::string_view::npos) {
                break;
            }
            rest.remove_prefix(colon + 1);
        }
        unavailable("redis-server not found on PATH (set RATELIMIT_REDIS_SERVER)");
    }

    [[noreturn]] static void unavailable(const std::string& why) {
        if (ciRun()) {
            throw std::runtime_error("ratelimit_test::RedisServer: " + why + " (CI=true: failing)");
        }
        throw RedisUnavailable("ratelimit_test::RedisServer: " + why);
    }

    static std::string makeTempDir() {
        // Unix socket paths are limited to 107 bytes: prefer a short TMPDIR, else /tmp.
        std::string base = "/tmp";
        // NOLINTNEXTLINE(concurrency-mt-unsafe): single-threaded test setup; nothing calls setenv
        if (const char* tmp = std::getenv("TMPDIR");
            tmp != nullptr && *tmp != '\0' && std::strlen(tmp) < 60) {
            base = tmp;
        }
        std::string pattern = base + "/rl-redis-XXXXXX";
        std::vector<char> buf(pattern.begin(), pattern.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) == nullptr) {
            throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
        }
        return {buf.data()};
    }

    void removeDir() noexcept {
        if (!dir_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(dir_, ec);
        }
    }

    /// Asks the kernel for a free loopback port (bind to port 0), then starts the server on it;
    /// another process may take the port in between, so a failed start is retried.
    void startOnFreePort() {
        std::string lastError;
        for (int attempt = 0; attempt < 20; ++attempt) {
            port_ = freePort();
            try {
                start();
                return;
            } catch (const std::runtime_error& e) {
                lastError = e.what();
            }
        }
        throw std::runtime_error("ratelimit_test::RedisServer: no free port after 20 attempts: " +
                                 lastError);
    }

    static int freePort() {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            throw std::system_error(errno, std::generic_category(), "socket");
        }
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = 0;
        socklen_t len = sizeof(addr);
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
        auto* sa = reinterpret_cast<sockaddr*>(&addr);
        if (::bind(fd, sa, sizeof(addr)) != 0 || ::getsockname(fd, sa, &len) != 0) {
            const int err = errno;
            ::close(fd);
            throw std::system_error(err, std::generic_category(), "bind 127.0.0.1:0");
        }
        ::close(fd);
        return ntohs(addr.sin_port);
    }

    [[nodiscard]] std::vector<std::string> arguments() const {
        std::vector<std::string> args = {binary_, "--daemonize",  "no", "--save",
                                         "",      "--appendonly", "no", "--dir",
                                         dir_,    "--logfile",    ""};
        if (options_.tcp) {
            args.insert(args.end(), {"--port", std::to_string(port_), "--bind", options_.bind});
        } else {
            args.insert(args.end(),
                        {"--port", "0", "--unixsocket", socket_, "--unixsocketperm", "700"});
        }
        args.insert(args.end(), options_.extraArgs.begin(), options_.extraArgs.end());
        return args;
    }

    void start() {
        if (!socket_.empty()) {
            ::unlink(socket_.c_str());
        }
        pid_t pid = 0;
        const std::string logPath = dir_ + "/redis.log";
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, logPath.c_str(),
                                         O_WRONLY | O_CREAT | O_APPEND, 0600);
        posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
        const int rc = spawnProcess(arguments(), actions, pid);
        posix_spawn_file_actions_destroy(&actions);
        if (rc != 0) {
            throw std::system_error(rc, std::generic_category(), "posix_spawn " + binary_);
        }
        pid_ = pid;
        waitUntilReady();
    }

    /// Polls PING until the server answers (any reply, NOAUTH included) or `startTimeout`.
    void waitUntilReady() {
        const auto deadline = std::chrono::steady_clock::now() + options_.startTimeout;
        while (std::chrono::steady_clock::now() < deadline) {
            if (reaped(false)) {
                throw std::runtime_error(
                    "ratelimit_test::RedisServer: redis-server exited at "
                    "start:\n" +
                    log());
            }
            const RedisContextPtr c{connect(std::chrono::milliseconds(200))};
            if (c != nullptr && c->err == 0) {
                const RedisReplyPtr r = command(c.get(), {"PING"});
                if (r != nullptr &&
                    (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)) {
                    return;
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        kill();
        throw std::runtime_error("ratelimit_test::RedisServer: no answer to PING within " +
                                 std::to_string(options_.startTimeout.count()) + " ms:\n" + log());
    }

    /// Reaps the child if it exited (or waits for it when `block`); true once it is gone.
    bool reaped(bool block) {
        if (pid_ <= 0) {
            return true;
        }
        int status = 0;
        pid_t r = 0;
        do {
            r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
        } while (r < 0 && errno == EINTR);
        if (r == pid_ || (r < 0 && errno == ECHILD)) {
            pid_ = -1;
            return true;
        }
        return false;
    }

    Options options_;
    std::string binary_;
    std::string dir_;
    std::string socket_;
    int port_ = 0;
    pid_t pid_ = -1;
};

}  // namespace ratelimit_test
