// Consumer link test of ratelimit::prometheus: the installed header compiles against the
// installed prometheus-cpp and links. Exits 0 iff a refusal shows in the scrape.
#include <string>

#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/ratelimit.hpp>

int main() {
    ratelimit::DecisionMetrics metrics;
    ratelimit::LimiterOptions options;
    options.name = "api";
    options.listener = &metrics;
    ratelimit::TokenBucket<> tb{ratelimit::Limit::perHour(1), {}, {}, options};
    (void)tb.tryAcquire("k");
    (void)tb.tryAcquire("k");
    const std::string text = ratelimit::serialize(ratelimit::PrometheusCollector(metrics));
    return text.find(R"(ratelimit_decisions_total{policy="api",outcome="refused"} 1)") !=
                   std::string::npos
               ? 0
               : 1;
}
