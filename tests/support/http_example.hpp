#pragma once

// The HTTP example server (examples/http_server.cpp; its path comes from CMake as
// RATELIMIT_HTTP_SERVER) as a child process of a test, and a plain HTTP/1.1 client for it.
// Shared by tests/http/http_server_test.cpp and tests/http/redis_http_server_test.cpp.

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <cctype>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <spawn.h>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <utility>
#include <vector>

#include "support/catch.hpp"

// NOLINTNEXTLINE(readability-redundant-declaration): <unistd.h> declares it only with _GNU_SOURCE
extern char** environ;

namespace http_example {

/// The decimal number `text` starts with; 0 when it starts with none or the number does not
/// fit an int, which the callers' checks then reject.
inline int leadingInt(std::string_view text) {
    int value = 0;
    const std::from_chars_result r = std::from_chars(text.data(), text.data() + text.size(), value);
    return r.ec == std::errc{} ? value : 0;
}

/// The example server as a child process: started with `--port 0`, its port read from its
/// first line, killed when this goes out of scope.
class ServerProcess {
public:
    explicit ServerProcess(std::vector<std::string> args) {
        std::array<int, 2> out{};
        REQUIRE(::pipe(out.data()) == 0);
        posix_spawn_file_actions_t actions;
        ::posix_spawn_file_actions_init(&actions);
        ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
        ::posix_spawn_file_actions_addclose(&actions, out[0]);
        // The program goes first in argv, not into `args`: g++ 12 at -O3 warns of a null
        // dereference inside vector<string>::insert at the front (a false positive).
        std::string program = RATELIMIT_HTTP_SERVER;
        std::vector<char*> argv;
        argv.reserve(args.size() + 2);
        argv.push_back(program.data());
        for (std::string& a : args) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        const int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
        ::posix_spawn_file_actions_destroy(&actions);
        ::close(out[1]);
        REQUIRE(rc == 0);
        std::string line;
        char c = 0;
        while (line.size() < 200) {
            pollfd p{out[0], POLLIN, 0};
            if (::poll(&p, 1, 10'000) != 1 || ::read(out[0], &c, 1) != 1 || c == '\n') {
                break;
            }
            line.push_back(c);
        }
        ::close(out[0]);
        INFO("first line: " << line);
        constexpr std::string_view kPrefix = "listening on 127.0.0.1:";
        REQUIRE(line.rfind(kPrefix, 0) == 0);
        port_ = leadingInt(std::string_view(line).substr(kPrefix.size()));
        REQUIRE(port_ > 0);
    }
    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;
    ServerProcess(ServerProcess&&) = delete;
    ServerProcess& operator=(ServerProcess&&) = delete;
    ~ServerProcess() {
        if (pid_ > 0) {
            ::kill(pid_, SIGTERM);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }

    [[nodiscard]] int port() const { return port_; }

private:
    pid_t pid_ = 0;
    int port_ = 0;
};

struct Response {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;

    [[nodiscard]] std::optional<std::string> header(std::string_view name) const {
        for (const auto& [n, v] : headers) {
            if (n.size() == name.size() &&
                std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
                    return std::tolower(static_cast<unsigned char>(a)) ==
                           std::tolower(static_cast<unsigned char>(b));
                })) {
                return v;
            }
        }
        return std::nullopt;
    }
};

/// One request on its own connection (`Connection: close`), read to the end. A non-empty
/// `formBody` is sent as `application/x-www-form-urlencoded` (`user=alice&password=secret`).
inline Response send(int port, std::string_view method, std::string_view target,
                     std::string_view extraHeaders = {}, std::string_view formBody = {}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    timeval timeout{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    std::string request = std::string(method) + " " + std::string(target) +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                          std::string(extraHeaders);
    if (!formBody.empty()) {
        request += "Content-Type: application/x-www-form-urlencoded\r\n";
    }
    request += "Content-Length: " + std::to_string(formBody.size()) + "\r\n\r\n";
    request += formBody;
    REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size()));
    std::string raw;
    std::array<char, 4096> buffer{};
    for (;;) {
        const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) {
            break;
        }
        raw.append(buffer.data(), static_cast<std::size_t>(n));
    }
    ::close(fd);

    Response r;
    const std::size_t headEnd = raw.find("\r\n\r\n");
    REQUIRE(headEnd != std::string::npos);
    REQUIRE(raw.rfind("HTTP/1.1 ", 0) == 0);
    r.status = leadingInt(std::string_view(raw).substr(9));
    std::size_t pos = raw.find("\r\n") + 2;
    while (pos < headEnd) {
        const std::size_t end = raw.find("\r\n", pos);
        const std::string line = raw.substr(pos, end - pos);
        const std::size_t colon = line.find(':');
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') {
            value.erase(0, 1);
        }
        r.headers.emplace_back(line.substr(0, colon), value);
        pos = end + 2;
    }
    r.body = raw.substr(headEnd + 4);
    return r;
}

/// A rule file (the example's --rules format) in a fresh temporary directory, which goes with
/// it.
class RuleFile {
public:
    explicit RuleFile(std::string_view rules) {
        REQUIRE(::mkdtemp(dir_.data()) != nullptr);
        path_ = dir_ + "/rules";
        std::ofstream out(path_);
        out << rules;
        REQUIRE(out.good());
    }
    RuleFile(const RuleFile&) = delete;
    RuleFile& operator=(const RuleFile&) = delete;
    RuleFile(RuleFile&&) = delete;
    RuleFile& operator=(RuleFile&&) = delete;
    ~RuleFile() {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }

    [[nodiscard]] const std::string& path() const noexcept { return path_; }

private:
    std::string dir_ = "/tmp/ratelimit-http-test-XXXXXX";
    std::string path_;
};

}  // namespace http_example
