#pragma once

// A spawned ratelimit_redis_worker (tests/support/redis_worker.cpp), the other process of the
// multi-process exactness tests: stdin is a pipe (the start signal), stdout and stderr files.
// posix_spawn, never fork, so a threaded test is safe.

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

#include "support/redis_server.hpp"

namespace ratelimit_test {

#ifdef RATELIMIT_REDIS_WORKER
inline constexpr const char* kWorker = RATELIMIT_REDIS_WORKER;
#else
inline constexpr const char* kWorker = "";
#endif

/// One worker process; its output files are `outputPath`.out and .err.
class WorkerProcess {
public:
    WorkerProcess(const std::vector<std::string>& arguments, const std::string& outputPath)
        : out_(outputPath + ".out"), err_(outputPath + ".err") {
        std::array<int, 2> fds{-1, -1};
        if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
            throw std::system_error(errno, std::generic_category(), "pipe2");
        }
        start_ = fds[1];
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);  // clears CLOEXEC
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int rc = spawnProcess(arguments, actions, pid_);
        posix_spawn_file_actions_destroy(&actions);
        ::close(fds[0]);
        if (rc != 0) {
            ::close(start_);
            throw std::system_error(rc, std::generic_category(), "posix_spawn " + arguments[0]);
        }
    }
    WorkerProcess(const WorkerProcess&) = delete;
    WorkerProcess& operator=(const WorkerProcess&) = delete;
    WorkerProcess(WorkerProcess&&) = delete;
    WorkerProcess& operator=(WorkerProcess&&) = delete;
    ~WorkerProcess() {
        go();
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }

    /// Sends the start signal (a byte, then end of file).
    void go() {
        if (start_ >= 0) {
            const char g = 'g';
            (void)::write(start_, &g, 1);
            ::close(start_);
            start_ = -1;
        }
    }

    /// Waits (at most 30 s, then kills) and returns the exit status, stdout and stderr.
    struct Result {
        int status;
        std::string out;
        std::string err;
    };
    Result wait() {
        int status = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
        while (::waitpid(pid_, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &status, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds{1});
        }
        pid_ = -1;
        return {status, read(out_), read(err_)};
    }

private:
    static std::string read(const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    }

    pid_t pid_ = -1;
    int start_ = -1;
    std::string out_;
    std::string err_;
};

}  // namespace ratelimit_test
