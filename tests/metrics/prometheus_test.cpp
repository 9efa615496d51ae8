// Tests of include/ratelimit/metrics/prometheus.hpp: the exposition's counters equal the
// DecisionMetrics counts, hostile keys (quotes, newlines, bytes that are not UTF-8) still give a
// valid scrape, and promtool (Debian: prometheus) accepts the text. Time is a ManualClock for the
// limiters and the metrics; nothing sleeps.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include <ratelimit/clock.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/metrics/decision_metrics.hpp>
#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::DecisionMetrics;
using ratelimit::DecisionMetricsOptions;
using ratelimit::Limit;
using ratelimit::LimiterOptions;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;
using ratelimit::PrometheusCollector;

using Limiter = ratelimit::FixedWindow<MemoryStorage, ManualClock>;

LimiterOptions named(const std::string& name, DecisionMetrics& metrics, bool dryRun = false) {
    LimiterOptions o;
    o.name = name;
    o.listener = &metrics;
    o.dryRun = dryRun;
    return o;
}

DecisionMetricsOptions onClock(const ManualClock& clock) {
    DecisionMetricsOptions o;
    o.clock = [clock] { return clock.now().time_since_epoch(); };
    return o;
}

/// The value of the series `series` (the name and its labels exactly as written), if present.
std::optional<double> sample(const std::string& text, const std::string& series) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
            line[series.size()] == ' ') {
            return std::stod(line.substr(series.size() + 1));
        }
    }
    return std::nullopt;
}

/// True when every byte sequence of `s` is well-formed UTF-8.
bool validUtf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        if (static_cast<unsigned char>(s[i]) < ratelimit::detail::utf8::kFirstNonAscii) {
            ++i;
        } else if (const std::size_t n = ratelimit::detail::wellFormedUtf8Length(s, i); n > 0) {
            i += n;
        } else {
            return false;
        }
    }
    return true;
}

struct CommandResult {
    int status = -1;
    std::string output;
};

/// Runs `command` with `input` on its standard input; its standard output and error together.
CommandResult run(const std::string& command, const std::string& input) {
    std::string dir = "/tmp/ratelimit-prometheus-test-XXXXXX";
    REQUIRE(::mkdtemp(dir.data()) != nullptr);
    const std::string in = dir + "/in";
    const std::string out = dir + "/out";
    {
        std::ofstream file(in, std::ios::binary);
        file << input;
        REQUIRE(file.good());
    }
    CommandResult r;
    // NOLINTNEXTLINE(cert-env33-c,concurrency-mt-unsafe): a fixed program on files made here
    r.status = std::system((command + " <" + in + " >" + out + " 2>&1").c_str());
    // Through rdbuf: from istreambuf_iterators, g++ 12 -O3 warns of a null dereference in
    // <streambuf> that cannot happen (-Wnull-dereference, the release leg).
    std::ifstream result(out, std::ios::binary);
    std::ostringstream text;
    text << result.rdbuf();
    r.output = text.str();
    CHECK(std::remove(in.c_str()) == 0);
    CHECK(std::remove(out.c_str()) == 0);
    CHECK(::rmdir(dir.c_str()) == 0);
    return r;
}

bool ciRun() {
    const char* ci = std::getenv("CI");  // NOLINT(concurrency-mt-unsafe): read before threads
    return ci != nullptr && std::string_view(ci) == "true";
}

}  // namespace

TEST_CASE("Prometheus: the exported counters are the DecisionMetrics counts",
          "[prometheus][metrics]") {
    const ManualClock clock;
    DecisionMetrics metrics(onClock(clock));
    const MemoryStorage storage;
    Limiter api(Limit::perHour(3), storage, clock, named("api", metrics));
    Limiter search(Limit::perHour(1), storage, clock, named("search", metrics, true));

    for (int i = 0; i < 5; ++i) {
        (void)api.tryAcquire("alice");  // 3 allowed, 2 refused, the second one early
    }
    (void)api.tryAcquire("bob");
    for (int i = 0; i < 3; ++i) {
        (void)search.tryAcquire("carol");  // 1 allowed, 2 dry-run refusals
    }

    PrometheusCollector collector(metrics);
    const std::string text = ratelimit::serialize(collector);
    INFO(text);
    for (const std::string policy : {"api", "search"}) {
        const ratelimit::PolicyCounts c = metrics.counts(policy);
        const std::string p = "{policy=\"" + policy + "\"";
        CHECK(sample(text, "ratelimit_decisions_total" + p + ",outcome=\"allowed\"}") ==
              static_cast<double>(c.allowed));
        CHECK(sample(text, "ratelimit_decisions_total" + p + ",outcome=\"refused\"}") ==
              static_cast<double>(c.refused));
        CHECK(sample(text, "ratelimit_decisions_total" + p + ",outcome=\"degraded\"}") ==
              static_cast<double>(c.degraded));
        CHECK(sample(text, "ratelimit_decisions_total" + p + ",outcome=\"dry_run_refused\"}") ==
              static_cast<double>(c.dryRunRefused));
        CHECK(sample(text, "ratelimit_early_retries_total" + p + "}") ==
              static_cast<double>(c.retriedEarly));
        CHECK(sample(text, "ratelimit_penalties_started_total" + p + "}") ==
              static_cast<double>(c.penaltiesStarted));
    }
    // The figures themselves, so that the comparison above cannot pass on zeros alone.
    CHECK(metrics.counts("api") == ratelimit::PolicyCounts{4, 2, 0, 0, 1, 0});
    CHECK(metrics.counts("search") == ratelimit::PolicyCounts{1, 0, 0, 2, 0, 0});
    CHECK(sample(text, R"(ratelimit_top_offender_refusals{policy="api",key="alice"})") == 2.0);
    CHECK(sample(text, R"(ratelimit_top_offenders_max_error{policy="api"})") == 0.0);
    CHECK(sample(text, R"(ratelimit_alerting_keys{policy="api"})") == 0.0);
    CHECK(sample(text, "ratelimit_store_healthy") == 1.0);
    CHECK(sample(text, "ratelimit_store_failing_episodes_total") == 0.0);
    CHECK(text.find("# TYPE ratelimit_decisions_total counter") != std::string::npos);
    CHECK(text.find("# TYPE ratelimit_top_offender_refusals gauge") != std::string::npos);
    CHECK(text.find("# HELP ratelimit_decisions_total Requests decided") != std::string::npos);

    // Counters only grow between scrapes.
    (void)api.tryAcquire("alice");
    const std::string later = ratelimit::serialize(collector);
    CHECK(sample(later, R"(ratelimit_decisions_total{policy="api",outcome="refused"})") == 3.0);
}

TEST_CASE("Prometheus: store health, spilling tables and the top-offender cut",
          "[prometheus][metrics]") {
    const ManualClock clock;
    DecisionMetrics metrics(onClock(clock));
    const MemoryStorage storage;
    Limiter api(Limit::perHour(1), storage, clock, named("api", metrics));
    for (int k = 0; k < 5; ++k) {
        for (int i = 0; i <= k + 1; ++i) {
            (void)api.tryAcquire("key-" + std::to_string(k));  // key-k refused k+1 times
        }
    }
    ratelimit::StoreEvent failing;
    failing.health = ratelimit::StoreEvent::Health::kFailing;
    failing.message = "connection refused";
    metrics.onStoreEvent(failing);
    metrics.onMemoryEvent(ratelimit::MemoryEvent::kSpillStarted, "api");

    ratelimit::PrometheusOptions options;
    options.topOffenders = 2;
    PrometheusCollector collector(metrics, options);
    std::string text = ratelimit::serialize(collector);
    INFO(text);
    CHECK(sample(text, R"(ratelimit_top_offender_refusals{policy="api",key="key-4"})") == 5.0);
    CHECK(sample(text, R"(ratelimit_top_offender_refusals{policy="api",key="key-3"})") == 4.0);
    CHECK_FALSE(sample(text, R"(ratelimit_top_offender_refusals{policy="api",key="key-2"})"));
    CHECK(sample(text, "ratelimit_store_healthy") == 0.0);
    CHECK(sample(text, "ratelimit_store_failing_episodes_total") == 1.0);
    CHECK(sample(text, R"(ratelimit_memory_spilling{table="api"})") == 1.0);

    // A table that stops spilling stays, at 0; the store recovers.
    metrics.onMemoryEvent(ratelimit::MemoryEvent::kSpillEnded, "api");
    ratelimit::StoreEvent healthy;
    healthy.health = ratelimit::StoreEvent::Health::kHealthy;
    metrics.onStoreEvent(healthy);
    text = ratelimit::serialize(collector);
    CHECK(sample(text, R"(ratelimit_memory_spilling{table="api"})") == 0.0);
    CHECK(sample(text, "ratelimit_store_healthy") == 1.0);
    CHECK(sample(text, "ratelimit_store_failing_episodes_total") == 1.0);

    options.topOffenders = ratelimit::PrometheusOptions::kMaxTopOffenders + 1;
    CHECK_THROWS_WITH(PrometheusCollector(metrics, options),
                      Catch::Matchers::Contains("PrometheusOptions.topOffenders"));
}

TEST_CASE("Prometheus: hostile keys and policy names give valid label values",
          "[prometheus][metrics]") {
    using ratelimit::detail::prometheusLabelValue;
    CHECK(prometheusLabelValue("plain key") == "plain key");
    CHECK(prometheusLabelValue("caf\xc3\xa9 \xe2\x82\xac") == "caf\xc3\xa9 \xe2\x82\xac");
    CHECK(prometheusLabelValue("a\"b\\c") == "a\"b\\c");  // the serializer escapes these
    CHECK(prometheusLabelValue("a\nb") ==
          "a\xef\xbf\xbd"
          "b");
    CHECK(prometheusLabelValue("\x1b[31mred") == "\xef\xbf\xbd[31mred");
    CHECK(prometheusLabelValue("\xc2\x9b"
                               "1m") ==
          "\xef\xbf\xbd"
          "1m");  // C1 CSI
    CHECK(prometheusLabelValue("x\xff\xfe") == "x\xef\xbf\xbd\xef\xbf\xbd");
    CHECK(prometheusLabelValue("\xc3") == "\xef\xbf\xbd");  // cut short
    CHECK(prometheusLabelValue("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    CHECK(prometheusLabelValue("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");  // overlong '/'
    CHECK(prometheusLabelValue(std::string_view("a\0b", 3)) ==
          "a\xef\xbf\xbd"
          "b");

    const ManualClock clock;
    DecisionMetrics metrics(onClock(clock));
    Limiter api(Limit::perHour(1), MemoryStorage{}, clock, named("api \"v1\"\n\xff", metrics));
    const std::string hostile = "evil\"} 1\nratelimit_store_healthy 0\n\\\xff\xfe";
    for (int i = 0; i < 3; ++i) {
        (void)api.tryAcquire(hostile);
    }
    // Two keys that differ only in bytes that are not UTF-8 show as the same label value: one
    // series, the higher count.
    for (int i = 0; i < 2; ++i) {
        (void)api.tryAcquire("twin\xff");
        (void)api.tryAcquire("twin\xfe");
    }
    (void)api.tryAcquire("twin\xfe");
    const std::string text = ratelimit::serialize(PrometheusCollector(metrics));
    INFO(text);
    CHECK(validUtf8(text));
    CHECK(
        sample(text,
               "ratelimit_top_offender_refusals{policy=\"api \\\"v1\\\"\xef\xbf\xbd\xef\xbf\xbd\","
               "key=\"evil\\\"} 1\xef\xbf\xbdratelimit_store_healthy 0\xef\xbf\xbd\\\\\xef\xbf\xbd"
               "\xef\xbf\xbd\"}") == 2.0);
    CHECK(sample(text, "ratelimit_store_healthy") == 1.0);  // not the key's forged line
    std::size_t twins = 0;
    for (std::size_t at = text.find("key=\"twin"); at != std::string::npos;
         at = text.find("key=\"twin", at + 1)) {
        ++twins;
    }
    CHECK(twins == 1);
    CHECK(sample(text,
                 "ratelimit_top_offender_refusals{policy=\"api \\\"v1\\\"\xef\xbf\xbd\xef"
                 "\xbf\xbd\",key=\"twin\xef\xbf\xbd\"}") == 2.0);
}

TEST_CASE("Prometheus: promtool check metrics accepts a scrape", "[prometheus][metrics]") {
    const std::string promtool = RATELIMIT_PROMTOOL;
    if (promtool.empty()) {
        if (ciRun()) {
            FAIL("promtool not found (Debian: prometheus); CI=true requires it");
        }
        WARN("promtool not found (Debian: prometheus): the scrape is not checked with it");
        return;
    }
    const ManualClock clock;
    DecisionMetrics metrics(onClock(clock));
    const MemoryStorage storage;
    Limiter api(Limit::perHour(2), storage, clock, named("api", metrics));
    Limiter login(Limit::perHour(1), storage, clock, named("login", metrics, true));
    for (const std::string key : {"alice", "bob", "evil\"}\n\\\xff\xfe", "10.0.0.1"}) {
        for (int i = 0; i < 4; ++i) {
            (void)api.tryAcquire(key);
            (void)login.tryAcquire(key);
        }
    }
    metrics.onMemoryEvent(ratelimit::MemoryEvent::kSpillStarted, "api");
    const std::string text = ratelimit::serialize(PrometheusCollector(metrics));
    const CommandResult r = run("'" + promtool + "' check metrics", text);
    INFO(text);
    INFO("promtool: " << r.output);
    CHECK(r.status == 0);
    CHECK(r.output.empty());  // no lint complaint either
}
