// RedisStorage against a bare hiredis FCALL loop of the same script, in the same run
// (bench/README.md reports the figures).
//
//   BM_<Algorithm>_Redis/keys:K/real_time/threads:T
//     tryAcquire(key) on a limiter with RedisStorage (the default RedisServerClock: the script
//     reads TIME), all threads sharing one RedisStorage (default options: pipelining over 2
//     connections). keys:1 is one hot key,
//     keys:10000 goes round-robin from each thread's own offset. The limit admits every call
//     of the run; a degraded or refused answer fails the row (SkipWithError).
//   BM_Set_TokenBucket_FixedWindow_Redis/keys:1/real_time/threads:1
//     The same with a limit set of a token bucket and a fixed window: one script call
//     (per_check, the requests per check, is 1) stepping both members.
//   BM_<Algorithm>_RedisPool/keys:1/real_time/threads:T
//     The same with `pipelining = false` (one caller per pooled connection), token bucket only.
//   BM_TokenBucket_RedisCluster/keys:10000/real_time/threads:T
//     The same checks on a Redis Cluster of the bench's own (tests/support/redis_cluster.hpp:
//     3 masters and 3 replicas on loopback TCP, started at the first such row), reached through
//     its nodes as seeds. on_master_<i> is the share of the row's scripts master i ran (from its
//     INFO commandstats), server_ns the three masters' CPU time per check together.
//   BM_TokenBucket_RedisLeased/keys:1/tokens:N/renew_below:R/real_time/threads:T
//     The hot key through a LeasedLimiter (<ratelimit/leasing.hpp>) of N tokens a lease over
//     the same storage, renewed when a check leaves fewer than R (0: only once spent; N/4: the
//     default); per_check is the store calls per check (1/N when every lease is spent).
//   BM_Baseline_HiredisFcall_<Algorithm>/keys:K/real_time/threads:T
//     The floor: each thread has its own blocking hiredis context and sends, with
//     redisCommandArgv, the FCALL RedisStorage::Table sends (its function, loaded before the
//     loop, and its arguments from the library's own encoder, detail::appendScriptRequest),
//     and reads the reply.
//
// The bench starts its own redis-server (tests/support/redis_server.hpp: a unix socket in a
// fresh temporary directory, persistence off); without one every row fails with
// SkipWithError("no redis-server: ..."), so a missing server never reads as a fast run.
//
// Counters: per_write is the storage's requests per write (above 1 when pipelining gathered
// several callers' requests into one write); server_ns is the redis-server's CPU time per check
// (all its threads, from /proc/<pid>/task/*/schedstat); the CPU column is the client threads' CPU
// time per check, so busy-polling on either side shows next to the real time.
//
// Placement: run the binary under `taskset -c <cpus>`; RATELIMIT_BENCH_REDIS_CPUS=<list> pins
// the server (every thread of it) with sched_setaffinity, e.g. server on CPU 0 and client on
// CPU 1, or both on CPU 0. bench/run.sh runs both placements.
//
// `ratelimit_redis_bench --dump-scripts=<dir>` writes, for every model, <dir>/<model>.library
// (the function library, for `FUNCTION LOAD`), <dir>/<model>.args (the FCALL of it a check
// sends, one word per line, for redis-benchmark) and <dir>/<model>.lua (the same script as
// EVALSHA runs it, where functions are off), and exits.

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sched.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <ratelimit/detail/redis_script.hpp>
#include <ratelimit/leasing.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/redis.hpp>

#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/resp.hpp"

namespace {

using ratelimit::Limit;
using ratelimit::RedisStorage;
namespace rt = ratelimit_test;

// ---------------------------------------------------------------------------------------------
// The server, started once for the whole run.

struct RedisEnv {
    std::unique_ptr<rt::RedisServer> server;
    std::unique_ptr<RedisStorage> storage;
    std::unique_ptr<RedisStorage> pool;  // the same options without pipelining
    std::string error;                   // why there is no server
};

RedisEnv& redisEnv() {
    static RedisEnv env;
    return env;
}

std::vector<std::size_t> parseCpuList(const char* text) {
    std::vector<std::size_t> cpus;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        if (!item.empty()) {
            cpus.push_back(std::stoul(item));
        }
    }
    return cpus;
}

std::string describeAffinity(pid_t pid) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(pid, sizeof set, &set) != 0) {
        return "?";
    }
    std::string out;
    for (std::size_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &set)) {
            if (!out.empty()) {
                out += ',';
            }
            out += std::to_string(cpu);
        }
    }
    return out;
}

/// Pins every thread of the server (main thread and background threads) to `cpus`.
void pinServer(pid_t pid, const std::vector<std::size_t>& cpus) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const std::size_t cpu : cpus) {
        CPU_SET(cpu, &set);
    }
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    for (const auto& entry : std::filesystem::directory_iterator(tasks)) {
        const auto tid = static_cast<pid_t>(std::stol(entry.path().filename().string()));
        if (::sched_setaffinity(tid, sizeof set, &set) != 0) {
            throw std::runtime_error("sched_setaffinity(" + std::to_string(tid) +
                                     "): " + std::strerror(errno));
        }
    }
}

/// CPU time the server has used so far, in ns, summed over its threads.
std::int64_t serverCpuNs(pid_t pid) {
    std::int64_t total = 0;
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(tasks, ec)) {
        std::ifstream in(entry.path() / "schedstat");
        std::int64_t onCpu = 0;
        if (in >> onCpu) {
            total += onCpu;
        }
    }
    return total;
}

void startRedis() {
    RedisEnv& env = redisEnv();
    try {
        env.server = std::make_unique<rt::RedisServer>();
        if (const char* cpus = std::getenv("RATELIMIT_BENCH_REDIS_CPUS");
            cpus != nullptr && *cpus != '\0') {
            pinServer(env.server->pid(), parseCpuList(cpus));
        }
        RedisStorage::Options options;
        options.unixSocket = env.server->unixSocket();
        options.timeout = std::chrono::milliseconds{1000};  // one core, 8 threads: no timeouts
        // RATELIMIT_BENCH_REDIS_PIPELINE=<connections> (0: pipelining off) tries other settings.
        if (const char* p = std::getenv("RATELIMIT_BENCH_REDIS_PIPELINE"); p != nullptr && *p) {
            const std::size_t connections = std::stoul(p);
            options.pipelining = connections > 0;
            options.pipelineConnections = std::max<std::size_t>(connections, 1);
        }
        benchmark::AddCustomContext(
            "redis_pipeline_connections",
            options.pipelining ? std::to_string(options.pipelineConnections) : std::string("off"));
        env.storage = std::make_unique<RedisStorage>(options);
        options.pipelining = false;
        env.pool = std::make_unique<RedisStorage>(options);
        benchmark::AddCustomContext("redis_server_cpus", describeAffinity(env.server->pid()));
    } catch (const std::exception& e) {
        env.server.reset();
        env.error = std::string("no redis-server: ") + e.what();
        benchmark::AddCustomContext("redis_server", env.error);
    }
    benchmark::AddCustomContext("bench_cpus", describeAffinity(0));
}

/// A Redis Cluster, started by the first row that needs one.
struct ClusterEnv {
    std::unique_ptr<rt::RedisCluster> cluster;
    std::unique_ptr<RedisStorage> storage;
    std::string error;  // why there is no cluster
};

ClusterEnv& clusterEnv() {
    static ClusterEnv env = [] {
        ClusterEnv e;
        try {
            e.cluster = std::make_unique<rt::RedisCluster>();
            RedisStorage::Options options;
            for (const auto& [host, port] : e.cluster->seeds()) {
                options.cluster.push_back({host, port});
            }
            options.timeout = std::chrono::milliseconds{1000};
            e.storage = std::make_unique<RedisStorage>(options);
        } catch (const std::exception& ex) {
            e.cluster.reset();
            e.error = std::string("no redis cluster: ") + ex.what();
        }
        return e;
    }();
    return env;
}

// ---------------------------------------------------------------------------------------------
// Limits: every call of a run is admitted, within Redis's exact range (2^53 µs).

template <class Model>
ratelimit::LimitOf<Model> allowedLimit() {
    if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return typename Model::Limits{allowedLimit<typename Model::template Member<I>>()...};
        }
        (std::make_index_sequence<Model::kSize>{});
    } else if constexpr (Model::kBucket) {
        return Limit::perSecond(1'000).withBurst(1'000'000'000);
    } else {
        return Limit::perSecond(1'000'000'000);
    }
}

const std::vector<std::string>& keySet(std::size_t n) {
    static std::mutex mutex;
    static std::map<std::size_t, std::vector<std::string>> sets;
    const std::lock_guard<std::mutex> lock(mutex);
    auto& set = sets[n];
    if (set.empty()) {
        char buffer[32];
        for (std::size_t i = 0; i < n; ++i) {
            const int length = std::snprintf(buffer, sizeof buffer, "user:%010zu", i);
            set.emplace_back(buffer, static_cast<std::size_t>(length));
        }
    }
    return set;
}

template <class Model>
using RedisLimiter = ratelimit::Limiter<Model, RedisStorage>;

ratelimit::LimiterOptions limiterOptions(const char* name) {
    ratelimit::LimiterOptions options;
    options.name = name;
    options.failurePolicy = ratelimit::FailurePolicy::kFailClosed;  // a failure shows as refused
    return options;
}

template <class Model>
RedisLimiter<Model>& limiter() {
    static RedisLimiter<Model> instance(allowedLimit<Model>(), *redisEnv().storage, {},
                                        limiterOptions("lib"));
    return instance;
}

template <class Model>
RedisLimiter<Model>& poolLimiter() {
    static RedisLimiter<Model> instance(allowedLimit<Model>(), *redisEnv().pool, {},
                                        limiterOptions("lib"));
    return instance;
}

/// What the bare loop sends: the same request as RedisStorage::Table::send, for one key.
template <class Model>
struct BareFcall {
    std::string script;
    std::string library;
    std::string function;
    std::vector<std::string> quotaArguments;

    BareFcall() {
        const ratelimit::Quota quota = ratelimit::Quota::make<Model>(
            allowedLimit<Model>(), RedisStorage::kNanosPerTick, 64, 0);
        // The same limiter name length as the library's rows ("lib"), another namespace.
        const auto table = RedisStorage{}.template table<Model>(limiterOptions("raw"), quota);
        script = table.script();
        library = table.scriptLibrary();
        function = table.scriptFunction();
        quotaArguments = ratelimit::detail::quotaArguments<Model>(quota);
        keyOf = [table](std::string_view key) { return table.redisKey(key); };
    }

    /// FCALL <function> 1 <key> <now: '' = TIME> <cost 1> <consume> <phase 0> <quota...>,
    /// encoded by the library's own encoder.
    [[nodiscard]] std::vector<std::string> arguments(std::string_view key) const {
        std::string request;
        const std::array<std::string, 1> keys{keyOf(key)};
        ratelimit::detail::appendScriptRequest(
            request, "FCALL", function, keys,
            {.now = "", .cost = 1, .mode = ratelimit::StepMode::kConsume, .phase = 0},
            quotaArguments);
        return rt::argvOf(request);
    }

    std::function<std::string(std::string_view)> keyOf;
};

// ---------------------------------------------------------------------------------------------
// Rows.

/// Server CPU per check, measured by thread 0 around its loop.
class ServerCpu {
public:
    explicit ServerCpu(const benchmark::State& state)
        : active_(state.thread_index() == 0),
          pid_(redisEnv().server->pid()),
          start_(active_ ? serverCpuNs(pid_) : 0) {}

    void report(benchmark::State& state) const {
        if (active_) {
            state.counters["server_ns"] =
                benchmark::Counter(static_cast<double>(serverCpuNs(pid_) - start_),
                                   benchmark::Counter::kAvgIterations);
        }
    }

private:
    bool active_;
    pid_t pid_;
    std::int64_t start_;
};

bool skipWithoutServer(benchmark::State& state) {
    const RedisEnv& env = redisEnv();
    if (env.server == nullptr) {
        state.SkipWithError(env.error.c_str());
        return true;
    }
    return false;
}

std::size_t startIndex(const benchmark::State& state, std::size_t n) {
    return static_cast<std::size_t>(state.thread_index()) * n /
           static_cast<std::size_t>(state.threads());
}

/// The timed loop of a limiter's row: `tryAcquire` on `keys` round-robin from the thread's own
/// offset; returns the checks refused or degraded (a store failure: the limits admit all).
template <class Limiter>
std::int64_t checkRoundRobin(benchmark::State& state, Limiter& lim,
                             const std::vector<std::string>& keys) {
    std::size_t i = startIndex(state, keys.size());
    std::int64_t failed = 0;
    for (auto _ : state) {
        const ratelimit::Decision d = lim.tryAcquire(keys[i]);
        failed += (!d.allowed || d.degraded) ? 1 : 0;
        benchmark::DoNotOptimize(d);
        if (++i == keys.size()) {
            i = 0;
        }
    }
    return failed;
}

template <class Model, bool kPool = false>
void BM_Redis(benchmark::State& state) {
    if (skipWithoutServer(state)) {
        return;
    }
    const auto& keys = keySet(static_cast<std::size_t>(state.range(0)));
    auto& lim = kPool ? poolLimiter<Model>() : limiter<Model>();
    RedisStorage& storage = kPool ? *redisEnv().pool : *redisEnv().storage;
    const ratelimit::RedisStats before = storage.stats();
    const ServerCpu cpu(state);
    const std::int64_t failed = checkRoundRobin(state, lim, keys);
    cpu.report(state);
    if (state.thread_index() == 0) {
        // Requests per write: above 1 when pipelining gathered several callers' requests.
        const ratelimit::RedisStats after = storage.stats();
        const auto writes = static_cast<double>(after.writes - before.writes);
        const auto requests = static_cast<double>(after.requests - before.requests);
        state.counters["per_write"] = requests / std::max(writes, 1.0);
        // Round trips per check: 1, a limit set's included.
        state.counters["per_check"] =
            requests / static_cast<double>(state.iterations() * state.threads());
    }
    state.SetItemsProcessed(state.iterations());
    if (failed != 0) {
        state.SkipWithError("a check was refused or degraded (store failure)");
    }
}

/// The leases the leased rows take: {tokens, renewBelow}.
constexpr std::array<std::array<std::int64_t, 2>, 4> kLeaseShapes{
    {{16, 0}, {16, 4}, {64, 16}, {256, 64}}};

template <class Model>
void BM_RedisLeased(benchmark::State& state) {
    if (skipWithoutServer(state)) {
        return;
    }
    using Leased = ratelimit::LeasedLimiter<RedisLimiter<Model>>;
    // One limiter per lease shape of the rows, shared by the row's threads (and each its own
    // key in Redis, by its name).
    static constexpr std::array<std::array<std::int64_t, 2>, kLeaseShapes.size()> shapes =
        kLeaseShapes;
    static constexpr std::array<const char*, kLeaseShapes.size()> names{"leased-0", "leased-1",
                                                                        "leased-2", "leased-3"};
    static const auto each = [] {
        std::array<std::unique_ptr<Leased>, kLeaseShapes.size()> made;
        for (std::size_t i = 0; i < made.size(); ++i) {
            made.at(i) = std::make_unique<Leased>(
                RedisLimiter<Model>(allowedLimit<Model>(), *redisEnv().storage, {},
                                    limiterOptions(names.at(i))),
                ratelimit::LeaseOptions{.tokens = shapes.at(i)[0], .renewBelow = shapes.at(i)[1]});
        }
        return made;
    }();
    const auto shape = std::find(shapes.begin(), shapes.end(),
                                 std::array<std::int64_t, 2>{state.range(1), state.range(2)});
    Leased& leased = *each.at(static_cast<std::size_t>(shape - shapes.begin()));
    const RedisStorage& storage = *redisEnv().storage;
    const std::string& key = keySet(1).front();
    std::int64_t failed = 0;
    const ratelimit::RedisStats before = storage.stats();
    for (auto _ : state) {
        const ratelimit::Decision d = leased.tryAcquire(key);
        failed += (!d.allowed || d.degraded) ? 1 : 0;
        benchmark::DoNotOptimize(d);
    }
    if (state.thread_index() == 0) {
        const ratelimit::RedisStats after = storage.stats();
        state.counters["per_check"] = static_cast<double>(after.requests - before.requests) /
                                      static_cast<double>(state.iterations() * state.threads());
    }
    state.SetItemsProcessed(state.iterations());
    if (failed != 0) {
        state.SkipWithError("a check was refused or degraded (store failure)");
    }
}

/// The scripts each master has run (`cmdstat_fcall`, `cmdstat_evalsha` and `cmdstat_eval`
/// calls).
std::vector<double> scriptsPerMaster(rt::RedisCluster& cluster) {
    std::vector<double> calls;
    for (std::size_t node = 0; node < rt::RedisCluster::kMasters; ++node) {
        const rt::RedisReplyPtr info = cluster.run(node, {"INFO", "commandstats"});
        const std::string text(info->str, info->len);
        double n = 0;
        for (const std::string_view command :
             {"cmdstat_fcall:calls=", "cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
            if (const std::size_t at = text.find(command); at != std::string::npos) {
                n += std::stod(text.substr(at + command.size()));
            }
        }
        calls.push_back(n);
    }
    return calls;
}

/// The masters' CPU time so far, together.
std::int64_t mastersCpuNs(const rt::RedisCluster& cluster) {
    std::int64_t total = 0;
    for (std::size_t node = 0; node < rt::RedisCluster::kMasters; ++node) {
        total += serverCpuNs(cluster.server(node).pid());
    }
    return total;
}

template <class Model>
void BM_RedisCluster(benchmark::State& state) {
    ClusterEnv& env = clusterEnv();
    if (env.cluster == nullptr) {
        state.SkipWithError(env.error.c_str());
        return;
    }
    static RedisLimiter<Model> lim(allowedLimit<Model>(), *env.storage, {}, limiterOptions("lib"));
    const auto& keys = keySet(static_cast<std::size_t>(state.range(0)));
    const bool first = state.thread_index() == 0;
    const std::vector<double> before =
        first ? scriptsPerMaster(*env.cluster) : std::vector<double>{};
    const std::int64_t cpuBefore = first ? mastersCpuNs(*env.cluster) : 0;
    const std::int64_t failed = checkRoundRobin(state, lim, keys);
    if (first) {
        const auto checks = static_cast<double>(state.iterations() * state.threads());
        state.counters["server_ns"] =
            static_cast<double>(mastersCpuNs(*env.cluster) - cpuBefore) / checks;
        const std::vector<double> after = scriptsPerMaster(*env.cluster);
        double all = 0;
        for (std::size_t m = 0; m < after.size(); ++m) {
            all += after[m] - before[m];
        }
        for (std::size_t m = 0; m < after.size(); ++m) {
            state.counters["on_master_" + std::to_string(m)] =
                (after[m] - before[m]) / std::max(all, 1.0);
        }
    }
    state.SetItemsProcessed(state.iterations());
    if (failed != 0) {
        state.SkipWithError("a check was refused or degraded (store failure)");
    }
}

template <class Model>
void BM_HiredisFcall(benchmark::State& state) {
    if (skipWithoutServer(state)) {
        return;
    }
    static const BareFcall<Model> request;
    const auto& keys = keySet(static_cast<std::size_t>(state.range(0)));
    // Every key's argument vector, built before timing: the loop only sends and reads.
    std::vector<std::vector<std::string>> args;
    args.reserve(keys.size());
    for (const std::string& key : keys) {
        args.push_back(request.arguments(key));
    }
    std::vector<std::vector<const char*>> argv(args.size());
    std::vector<std::vector<std::size_t>> argvLen(args.size());
    for (std::size_t k = 0; k < args.size(); ++k) {
        for (const std::string& a : args[k]) {
            argv[k].push_back(a.data());
            argvLen[k].push_back(a.size());
        }
    }
    const rt::RedisContextPtr c{redisEnv().server->connect()};
    if (c == nullptr || c->err != 0) {
        state.SkipWithError("cannot connect to the bench's redis-server");
        return;
    }
    const rt::RedisReplyPtr loaded =
        rt::command(c.get(), {"FUNCTION", "LOAD", "REPLACE", request.library});
    if (loaded == nullptr || loaded->type != REDIS_REPLY_STRING) {
        state.SkipWithError("FUNCTION LOAD failed");
        return;
    }
    const int argc = static_cast<int>(args.front().size());
    std::size_t i = startIndex(state, keys.size());
    std::int64_t failed = 0;
    const ServerCpu cpu(state);
    for (auto _ : state) {
        const rt::RedisReplyPtr reply{static_cast<redisReply*>(
            redisCommandArgv(c.get(), argc, argv[i].data(), argvLen[i].data()))};
        const bool ok = reply != nullptr && reply->type == REDIS_REPLY_ARRAY &&
                        reply->elements == 4 &&
                        reply->element[0]->integer == ratelimit::detail::kReplyAdmitted;
        failed += ok ? 0 : 1;
        benchmark::DoNotOptimize(reply.get());
        if (++i == keys.size()) {
            i = 0;
        }
    }
    cpu.report(state);
    state.SetItemsProcessed(state.iterations());
    if (failed != 0) {
        state.SkipWithError("an FCALL failed or was refused");
    }
}

template <class Model>
void dumpScripts(const std::filesystem::path& dir) {
    const BareFcall<Model> request;
    std::ofstream(dir / (std::string(Model::kName) + ".lua"), std::ios::binary) << request.script;
    std::ofstream(dir / (std::string(Model::kName) + ".library"), std::ios::binary)
        << request.library;
    std::ofstream args(dir / (std::string(Model::kName) + ".args"), std::ios::binary);
    for (const std::string& a : request.arguments("user:0000000000")) {
        args << a << '\n';
    }
}

template <class Model>
void registerAlgorithm(const std::string& name, bool threads) {
    auto* lib = benchmark::RegisterBenchmark(("BM_" + name + "_Redis").c_str(), &BM_Redis<Model>);
    auto* bare = benchmark::RegisterBenchmark(("BM_Baseline_HiredisFcall_" + name).c_str(),
                                              &BM_HiredisFcall<Model>);
    if (threads) {
        // The same rows without pipelining (one caller per pooled connection), in the same run.
        benchmark::RegisterBenchmark(("BM_" + name + "_RedisPool").c_str(), &BM_Redis<Model, true>)
            ->ArgNames({"keys"})
            ->Arg(1)
            ->Threads(1)
            ->Threads(8)
            ->UseRealTime();
    }
    for (auto* b : {lib, bare}) {
        b->ArgNames({"keys"});
        if (threads) {
            b->Arg(1)->Arg(10'000)->Threads(1)->Threads(2)->Threads(4)->Threads(8);
        } else {
            b->Arg(1)->Threads(1);
        }
        b->UseRealTime();
    }
}

}  // namespace

int main(int argc, char** argv) {
    for (int a = 1; a < argc; ++a) {
        const std::string_view arg = argv[a];
        constexpr std::string_view kDump = "--dump-scripts=";
        if (arg.substr(0, kDump.size()) == kDump) {
            const std::filesystem::path dir(std::string(arg.substr(kDump.size())));
            std::filesystem::create_directories(dir);
            dumpScripts<ratelimit::TokenBucketModel>(dir);
            dumpScripts<ratelimit::LeakyBucketModel>(dir);
            dumpScripts<ratelimit::FixedWindowModel>(dir);
            dumpScripts<ratelimit::SlidingCounterModel>(dir);
            dumpScripts<ratelimit::SlidingLogModel>(dir);
            return 0;
        }
    }

    registerAlgorithm<ratelimit::TokenBucketModel>("TokenBucket", true);
    benchmark::RegisterBenchmark("BM_TokenBucket_RedisLeased",
                                 &BM_RedisLeased<ratelimit::TokenBucketModel>)
        ->ArgNames({"keys", "tokens", "renew_below"})
        ->Args({1, 16, 0})
        ->Args({1, 16, 4})
        ->Args({1, 64, 16})
        ->Args({1, 256, 64})
        ->Threads(1)
        ->Threads(8)
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_TokenBucket_RedisCluster",
                                 &BM_RedisCluster<ratelimit::TokenBucketModel>)
        ->ArgNames({"keys"})
        ->Arg(10'000)
        ->Threads(1)
        ->Threads(8)
        ->UseRealTime();
    registerAlgorithm<ratelimit::LeakyBucketModel>("LeakyBucket", false);
    registerAlgorithm<ratelimit::FixedWindowModel>("FixedWindow", false);
    registerAlgorithm<ratelimit::SlidingCounterModel>("SlidingCounter", false);
    registerAlgorithm<ratelimit::SlidingLogModel>("SlidingLog", false);
    // A limit set of two members, one script call per check.
    benchmark::RegisterBenchmark(
        "BM_Set_TokenBucket_FixedWindow_Redis",
        &BM_Redis<ratelimit::LimitSet<ratelimit::TokenBucketModel, ratelimit::FixedWindowModel>>)
        ->ArgNames({"keys"})
        ->Arg(1)
        ->Threads(1)
        ->UseRealTime();

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    startRedis();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    redisEnv().pool.reset();
    redisEnv().storage.reset();
    redisEnv().server.reset();
    return 0;
}
