// Two processes sharing one limit through Redis, a 20-per-hour token bucket on one key: this
// process sends 10 requests, a second process sends 30, then this one 20 more. Together they
// are admitted exactly 20: 10 here, the 10 left in the second process, none after.
//
//   redis_shared --unix /path/to/redis.sock      or      redis_shared --host 127.0.0.1 --port 6379
//   (default: $RATELIMIT_REDIS_SOCKET if set, else 127.0.0.1:6379)
//
// The parent starts a second copy of itself (posix_spawn, `--child`), which reports how many it
// was admitted through its exit status.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <spawn.h>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <ratelimit/redis.hpp>

// POSIX's process environment, which not every <unistd.h> declares (glibc does, for C++).
// NOLINTNEXTLINE(*-redundant-declaration,*-avoid-non-const-global-variables)
extern char** environ;

namespace {

constexpr int kLimitPerHour = 20;
constexpr int kFirstAttempts = 10;   // this process, before the second one runs
constexpr int kChildAttempts = 30;   // the second process
constexpr int kSecondAttempts = 20;  // this process, after the second one
constexpr std::chrono::milliseconds kTimeout{500};

int admitted(const ratelimit::RedisStorage& redis, const std::string& key, int attempts) {
    // Fail closed: a demo of exactness should not count a degraded answer as admitted.
    ratelimit::TokenBucket<ratelimit::RedisStorage> shared{
        ratelimit::Limit::perHour(kLimitPerHour),
        redis,
        {},
        {.name = "redis-shared-demo", .failurePolicy = ratelimit::FailurePolicy::kFailClosed}};
    int count = 0;
    for (int i = 0; i < attempts; ++i) {
        const ratelimit::Decision d = shared.tryAcquire(key);
        if (d.degraded) {
            std::fprintf(stderr, "redis is not answering\n");
            std::exit(100);
        }
        count += d.allowed ? 1 : 0;
    }
    return count;
}

}  // namespace

int main(int argc, char** argv) try {
    ratelimit::RedisStorage::Options options;
    if (const char* socket = std::getenv("RATELIMIT_REDIS_SOCKET"); socket != nullptr) {
        options.unixSocket = socket;  // how the tests point it at their own server
    }
    bool child = false;
    std::string key = "demo:" + std::to_string(::getpid());
    std::vector<std::string> forwarded;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const bool hasValue = i + 1 < argc;
        if (arg == "--unix" && hasValue) {
            options.unixSocket = argv[++i];
        } else if (arg == "--host" && hasValue) {
            options.host = argv[++i];
        } else if (arg == "--port" && hasValue) {
            const std::string_view port = argv[++i];
            const auto [end, error] =
                std::from_chars(port.data(), port.data() + port.size(), options.port);
            if (error != std::errc{} || end != port.data() + port.size()) {
                std::fprintf(stderr, "bad --port %s\n", argv[i]);
                return 2;
            }
        } else if (arg == "--child" && hasValue) {
            child = true;
            key = argv[++i];
            continue;
        } else {
            std::fprintf(stderr, "usage: %s [--unix PATH | --host HOST --port PORT]\n", argv[0]);
            return 2;
        }
        forwarded.emplace_back(arg);
        forwarded.emplace_back(argv[i]);
    }
    options.timeout = kTimeout;
    const ratelimit::RedisStorage redis{options};

    if (child) {
        return admitted(redis, key, kChildAttempts);
    }

    std::vector<std::string> childArgs{argv[0], "--child", key};
    childArgs.insert(childArgs.end(), forwarded.begin(), forwarded.end());
    std::vector<char*> childArgv;
    childArgv.reserve(childArgs.size() + 1);
    for (std::string& a : childArgs) {
        childArgv.push_back(a.data());
    }
    childArgv.push_back(nullptr);
    const int before = admitted(redis, key, kFirstAttempts);
    pid_t pid = 0;
    if (::posix_spawn(&pid, argv[0], nullptr, nullptr, childArgv.data(), environ) != 0) {
        std::perror("posix_spawn");
        return 1;
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    const int after = admitted(redis, key, kSecondAttempts);
    if (!WIFEXITED(status) || WEXITSTATUS(status) > kChildAttempts) {
        std::fprintf(stderr, "the second process failed\n");
        return 1;
    }
    const int theirs = WEXITSTATUS(status);
    std::printf(
        "process %ld: %d of 10 admitted\nprocess %ld: %d of 30 admitted\n"
        "process %ld: %d of 20 admitted\n%d in all (limit 20)\n",
        static_cast<long>(::getpid()), before, static_cast<long>(pid), theirs,
        static_cast<long>(::getpid()), after, before + theirs + after);
    return before + theirs + after == kLimitPerHour ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "redis_shared: %s\n", e.what());
    return 1;
}
