#pragma once

// A `DecisionMetrics` as Prometheus metrics, through prometheus-cpp (target ratelimit::prometheus;
// Debian: prometheus-cpp-dev): a `prometheus::Collectable` that reads the metrics when scraped.
// Optional: nothing else in the library includes it.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>
#include <prometheus/text_serializer.h>

#include <ratelimit/detail/throw.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/metrics/decision_metrics.hpp>

namespace ratelimit {
inline namespace v1 {

/// Options of a `PrometheusCollector`. Fields only ever get added at the end.
struct PrometheusOptions {
    /// Keys exported per policy in `ratelimit_top_offender_refusals` (0 … 1000; 0: none). Each
    /// key is a series of its own in the time-series database: keep it small.
    std::size_t topOffenders = 10;

    /// Throws: `std::invalid_argument` naming the field.
    void validate() const {
        if (topOffenders > kMaxTopOffenders) {
            detail::throwInvalidArgument(
                "PrometheusOptions.topOffenders must be in 0..1000 (got {})",
                {static_cast<std::int64_t>(topOffenders)});
        }
    }

    static constexpr std::size_t kMaxTopOffenders = 1000;
};

namespace detail {

/// Control characters (C0, DEL and C1) and the byte sequences that are not UTF-8, which a
/// label value replaces with U+FFFD.
inline constexpr unsigned kDelete = 0x7f;
inline constexpr unsigned kC1Lead = 0xc2;  // U+0080 … U+009F are 0xc2 0x80 … 0xc2 0x9f
inline constexpr unsigned kC1SecondLast = 0x9f;
inline constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

/// The character at `s[i]`: its length in bytes (1 for a byte that starts no well-formed
/// sequence) and whether a label value keeps it (no control character, no such byte).
[[nodiscard]] constexpr std::pair<std::size_t, bool> labelCharacter(std::string_view s,
                                                                    std::size_t i) noexcept {
    const unsigned c = static_cast<unsigned char>(s[i]);
    if (c < utf8::kFirstNonAscii) {
        return {1, c >= utf8::kFirstUnescaped && c != kDelete};
    }
    const std::size_t n = wellFormedUtf8Length(s, i);
    if (n == 0) {
        return {1, false};
    }
    const bool c1 = c == kC1Lead && static_cast<unsigned char>(s[i + 1]) <= kC1SecondLast;
    return {n, !c1};
}

/// `s` as a Prometheus label value: valid UTF-8 (the exposition format's one demand), each
/// control character and each byte that starts no well-formed sequence replaced with U+FFFD,
/// so a client's key can neither break the scrape nor write escape sequences to a terminal
/// that shows it. Quotes and backslashes stay: prometheus-cpp's serializer escapes them.
[[nodiscard]] inline std::string prometheusLabelValue(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const auto [n, keep] = labelCharacter(s, i);
        out.append(keep ? s.substr(i, n) : kReplacement);
        i += n;
    }
    return out;
}

}  // namespace detail

/// Exports a `DecisionMetrics` to Prometheus: each `Collect()` (each scrape) reads `report()`
/// and `storeHealth()` and builds these families, which prometheus-cpp's `TextSerializer` (or
/// its `Exposer`) writes out:
///
/// - `ratelimit_decisions_total{policy, outcome}`, counter; outcome is `allowed`, `refused`,
///   `degraded` or `dry_run_refused`
/// - `ratelimit_early_retries_total{policy}`, counter
/// - `ratelimit_penalties_started_total{policy}`, counter
/// - `ratelimit_top_offender_refusals{policy, key}`, gauge, for the `topOffenders` most refused
/// - `ratelimit_top_offenders_max_error{policy}`, gauge
/// - `ratelimit_alerting_keys{policy}`, gauge
/// - `ratelimit_alerts_dropped_total{policy}`, counter
/// - `ratelimit_store_healthy`, gauge (1 or 0)
/// - `ratelimit_store_failing_episodes_total`, counter
/// - `ratelimit_memory_spilling{table}`, gauge (1 or 0), every table seen spilling
///
/// Label values are made valid UTF-8 (`detail::prometheusLabelValue`). Two offenders whose
/// shown keys come out the same (cut at `RefusalSummaryOptions::maxKeyBytes`, or replaced
/// bytes) are one series: the first, higher, count. Each `Collect()` ends the alerts that are
/// over, as `report()` does.
/// Thread safety: thread-safe. `metrics` must outlive it.
class PrometheusCollector final : public prometheus::Collectable {
public:
    /// Throws: `std::invalid_argument` naming the field.
    explicit PrometheusCollector(DecisionMetrics& metrics, PrometheusOptions options = {})
        : metrics_(&metrics), options_(validated(options)) {}

    [[nodiscard]] std::vector<prometheus::MetricFamily> Collect() const override {
        const std::vector<PolicyReport> reports = metrics_->report(options_.topOffenders);
        const StoreHealthReport health = metrics_->storeHealth();

        auto decisions = family("ratelimit_decisions_total",
                                "Requests decided, by policy (limiter or route rule name) and "
                                "outcome: allowed, refused, degraded (the store failed and the "
                                "failure policy answered) or dry_run_refused (admitted in dry-run "
                                "where enforcing would have refused).",
                                prometheus::MetricType::Counter);
        auto early = family("ratelimit_early_retries_total",
                            "Refusals of a key that came back before the Retry-After of its "
                            "previous refusal had passed.",
                            prometheus::MetricType::Counter);
        auto penalties = family("ratelimit_penalties_started_total",
                                "Refusals that started a penalty's block (a penalized limiter's "
                                "strikes reached their count).",
                                prometheus::MetricType::Counter);
        auto offenders = family("ratelimit_top_offender_refusals",
                                "Refusals of the most refused keys over the sliding window, never "
                                "below the true count and above it by at most "
                                "ratelimit_top_offenders_max_error.",
                                prometheus::MetricType::Gauge);
        auto maxError = family("ratelimit_top_offenders_max_error",
                               "The most any ratelimit_top_offender_refusals of the policy "
                               "exceeds its key's true count.",
                               prometheus::MetricType::Gauge);
        auto alerting = family("ratelimit_alerting_keys",
                               "Keys whose refusals within the window crossed the alert "
                               "threshold, now.",
                               prometheus::MetricType::Gauge);
        auto dropped = family("ratelimit_alerts_dropped_total",
                              "Alerts not started because the most keys allowed were in alert.",
                              prometheus::MetricType::Counter);
        for (const PolicyReport& r : reports) {
            const std::string policy = detail::prometheusLabelValue(r.policy);
            const std::array<std::pair<std::string_view, std::uint64_t>, 4> outcomes{
                {{"allowed", r.counts.allowed},
                 {"refused", r.counts.refused},
                 {"degraded", r.counts.degraded},
                 {"dry_run_refused", r.counts.dryRunRefused}}};
            for (const auto& [outcome, count] : outcomes) {
                add(decisions, {{"policy", policy}, {"outcome", std::string(outcome)}},
                    static_cast<double>(count));
            }
            add(early, {{"policy", policy}}, static_cast<double>(r.counts.retriedEarly));
            add(penalties, {{"policy", policy}}, static_cast<double>(r.counts.penaltiesStarted));
            addOffenders(offenders, policy, r.topOffenders);
            add(maxError, {{"policy", policy}}, static_cast<double>(r.topOffenders.maxError));
            add(alerting, {{"policy", policy}}, static_cast<double>(r.alerting.size()));
            add(dropped, {{"policy", policy}}, static_cast<double>(r.alertsDropped));
        }

        auto healthy = family("ratelimit_store_healthy",
                              "1 while the store answers, 0 from its first failure until it "
                              "recovers.",
                              prometheus::MetricType::Gauge);
        add(healthy, {}, health.healthy ? 1.0 : 0.0);
        auto episodes = family("ratelimit_store_failing_episodes_total",
                               "Times the store went from healthy to failing.",
                               prometheus::MetricType::Counter);
        add(episodes, {}, static_cast<double>(health.failingEpisodes));
        auto spilling = family("ratelimit_memory_spilling",
                               "1 while a memory table is full and its new keys share spill "
                               "entries (coarser limits), 0 after.",
                               prometheus::MetricType::Gauge);
        for (const auto& [table, now] : spillingTables(health.spilling)) {
            add(spilling, {{"table", table}}, now ? 1.0 : 0.0);
        }

        std::vector<prometheus::MetricFamily> out;
        out.reserve(kFamilies);
        for (auto* f : {&decisions, &early, &penalties, &offenders, &maxError, &alerting, &dropped,
                        &healthy, &episodes, &spilling}) {
            out.push_back(std::move(*f));
        }
        return out;
    }

    [[nodiscard]] const PrometheusOptions& options() const noexcept { return options_; }

private:
    static constexpr std::size_t kFamilies = 10;

    using Labels = std::vector<prometheus::ClientMetric::Label>;

    static PrometheusOptions validated(const PrometheusOptions& options) {
        options.validate();
        return options;
    }

    static prometheus::MetricFamily family(std::string name, std::string help,
                                           prometheus::MetricType type) {
        prometheus::MetricFamily f;
        f.name = std::move(name);
        f.help = std::move(help);
        f.type = type;
        return f;
    }

    static void add(prometheus::MetricFamily& f, Labels labels, double value) {
        prometheus::ClientMetric m;
        m.label = std::move(labels);
        if (f.type == prometheus::MetricType::Counter) {
            m.counter.value = value;
        } else {
            m.gauge.value = value;
        }
        f.metric.push_back(std::move(m));
    }

    static void addOffenders(prometheus::MetricFamily& f, const std::string& policy,
                             const TopOffenders& top) {
        std::vector<std::string> shown;
        shown.reserve(top.offenders.size());
        for (const Offender& o : top.offenders) {
            std::string key = detail::prometheusLabelValue(o.key);
            if (std::find(shown.begin(), shown.end(), key) != shown.end()) {
                continue;  // a series per label set: the first (highest) count stands
            }
            shown.push_back(key);
            add(f, {{"policy", policy}, {"key", std::move(key)}}, static_cast<double>(o.count));
        }
    }

    /// Every table seen spilling, as a label value, and whether it spills now.
    std::vector<std::pair<std::string, bool>> spillingTables(
        const std::vector<std::string>& now) const {
        std::vector<std::string> current;
        current.reserve(now.size());
        for (const std::string& t : now) {
            current.push_back(detail::prometheusLabelValue(t));
        }
        const std::lock_guard guard(seenLock_);
        for (const std::string& t : current) {
            if (std::find(seen_.begin(), seen_.end(), t) == seen_.end()) {
                seen_.push_back(t);
            }
        }
        std::vector<std::pair<std::string, bool>> out;
        out.reserve(seen_.size());
        for (const std::string& t : seen_) {
            out.emplace_back(t, std::find(current.begin(), current.end(), t) != current.end());
        }
        return out;
    }

    DecisionMetrics* metrics_;
    PrometheusOptions options_;
    mutable std::mutex seenLock_;
    mutable std::vector<std::string> seen_;  // guarded by seenLock_
};

/// `collectable`'s metrics in the Prometheus text exposition format (version 0.0.4; serve it as
/// `text/plain; version=0.0.4; charset=utf-8`), written by prometheus-cpp's `TextSerializer`.
[[nodiscard]] inline std::string serialize(const prometheus::Collectable& collectable) {
    std::ostringstream out;
    prometheus::TextSerializer{}.Serialize(out, collectable.Collect());
    return out.str();
}

/// The content type of `serialize`'s text.
inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

}  // namespace v1
}  // namespace ratelimit
