// Tests of the algorithm explorer (tools/explore/main.cpp and the headers beside it): its figures
// for the worked scenarios are the ones the algorithm tests (tests/algorithms/) assert, its
// over-admission bounds hold and are reached, its chart is well-formed XML with the right marks,
// and bad input is refused with its place and no output. Time is the explorer's ManualClock;
// nothing sleeps.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/limit.hpp>

#include "cli.hpp"
#include "replay.hpp"
#include "report.hpp"
#include "support/catch.hpp"
#include "svg.hpp"
#include "traffic.hpp"

using namespace std::chrono_literals;

namespace {

using explore::Algorithm;
using explore::Nanos;
using ratelimit::Limit;

using Counts = std::vector<std::int64_t>;

explore::Replay replayInline(std::string_view rule, std::string_view traffic) {
    explore::TrafficBuilder builder;
    explore::parseInlineTraffic(traffic, builder);
    return explore::replay(Limit::parse(rule), std::move(builder).build(),
                           {explore::kAllAlgorithms.begin(), explore::kAllAlgorithms.end()});
}

const explore::AlgorithmRun& runOf(const explore::Replay& r, Algorithm a) {
    for (const explore::AlgorithmRun& run : r.runs) {
        if (run.algorithm == a) {
            return run;
        }
    }
    FAIL("no run for " << explore::nameOf(a));
    return r.runs.front();
}

Counts admittedPerBatch(const explore::Replay& r, Algorithm a) {
    Counts out;
    for (const explore::Batch& b : runOf(r, a).batches) {
        out.push_back(b.admitted);
    }
    return out;
}

/// Runs the explorer's command line; returns (exit status, stdout, stderr).
struct Outcome {
    int status = -1;
    std::string out;
    std::string err;
};
Outcome runExplorer(std::vector<std::string> args) {
    std::ostringstream out;
    std::ostringstream err;
    const int status = explore::run(std::move(args), out, err);
    return {status, out.str(), err.str()};
}

/// A file in a fresh directory of the system's temporary directory, removed with the object.
class TempDir {
public:
    TempDir() {
        std::random_device seed;
        path_ = std::filesystem::temp_directory_path() /
                ("ratelimit-explore-test-" + std::to_string(seed()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    TempDir(TempDir&&) = delete;
    TempDir& operator=(TempDir&&) = delete;

    [[nodiscard]] std::string file(std::string_view name, std::string_view content = {}) const {
        const std::filesystem::path p = path_ / name;
        if (!content.empty()) {
            std::ofstream(p, std::ios::binary) << content;
        }
        return p.string();
    }

private:
    std::filesystem::path path_;
};

// ---------------------------------------------------------------------------------------------
// A small XML well-formedness checker for the chart: tags balance, one root, attributes quoted
// and unique, entities known. It returns the elements in document order.

struct Element {
    std::string name;
    std::map<std::string, std::string> attributes;
    std::size_t depth = 0;
    std::string parentClass;  ///< the class of the nearest enclosing <g>, if any
};

struct XmlResult {
    bool ok = false;
    std::string error;
    std::vector<Element> elements;
};

XmlResult parseXml(std::string_view s) {
    XmlResult result;
    std::size_t pos = 0;
    std::vector<std::pair<std::string, std::string>> open;  // (name, class)
    std::size_t roots = 0;
    const auto failAt = [&](const std::string& what) {
        result.error = what + " at offset " + std::to_string(pos);
        return result;
    };
    const auto isNameChar = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_' || c == ':' || c == '.';
    };
    const auto entitiesOk = [](std::string_view text) {
        for (std::size_t i = 0; i < text.size(); ++i) {
            if (text[i] == '<') {
                return false;
            }
            if (text[i] == '&') {
                const std::size_t semi = text.find(';', i);
                if (semi == std::string_view::npos) {
                    return false;
                }
                const std::string_view e = text.substr(i + 1, semi - i - 1);
                if (e != "amp" && e != "lt" && e != "gt" && e != "quot" && e != "apos" &&
                    !(e.size() > 1 && e[0] == '#')) {
                    return false;
                }
            }
        }
        return true;
    };
    const auto readName = [&] {
        const std::size_t start = pos;
        while (pos < s.size() && isNameChar(s[pos])) {
            ++pos;
        }
        return std::string(s.substr(start, pos - start));
    };
    const auto skipSpace = [&] {
        while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' || s[pos] == '\t')) {
            ++pos;
        }
    };
    if (s.substr(0, 5) == "<?xml") {
        pos = s.find("?>");
        if (pos == std::string_view::npos) {
            return failAt("unterminated XML declaration");
        }
        pos += 2;
    }
    while (pos < s.size()) {
        const std::size_t lt = s.find('<', pos);
        const std::string_view text =
            s.substr(pos, lt == std::string_view::npos ? std::string_view::npos : lt - pos);
        if (!entitiesOk(text)) {
            return failAt("bad character data");
        }
        if (open.empty() && text.find_first_not_of(" \n\t") != std::string_view::npos) {
            return failAt("text outside the root element");
        }
        if (lt == std::string_view::npos) {
            break;
        }
        pos = lt + 1;
        if (s.substr(pos, 3) == "!--") {
            const std::size_t end = s.find("-->", pos);
            if (end == std::string_view::npos) {
                return failAt("unterminated comment");
            }
            pos = end + 3;
            continue;
        }
        if (pos < s.size() && s[pos] == '/') {
            ++pos;
            const std::string name = readName();
            skipSpace();
            if (pos >= s.size() || s[pos] != '>') {
                return failAt("bad closing tag");
            }
            ++pos;
            if (open.empty() || open.back().first != name) {
                return failAt("closing </" + name + "> does not match");
            }
            open.pop_back();
            continue;
        }
        Element e;
        e.name = readName();
        if (e.name.empty()) {
            return failAt("expected an element name");
        }
        e.depth = open.size();
        const auto group =
            std::find_if(open.rbegin(), open.rend(), [](const auto& o) { return o.first == "g"; });
        if (group != open.rend()) {
            e.parentClass = group->second;
        }
        bool selfClosing = false;
        while (true) {
            const std::size_t before = pos;
            skipSpace();
            if (pos >= s.size()) {
                return failAt("unterminated tag <" + e.name);
            }
            if (s[pos] == '>') {
                ++pos;
                break;
            }
            if (s.substr(pos, 2) == "/>") {
                pos += 2;
                selfClosing = true;
                break;
            }
            if (pos == before) {
                return failAt("expected space before an attribute");
            }
            const std::string attribute = readName();
            if (attribute.empty() || pos >= s.size() || s[pos] != '=') {
                return failAt("bad attribute in <" + e.name);
            }
            ++pos;
            if (pos >= s.size() || (s[pos] != '"' && s[pos] != '\'')) {
                return failAt("unquoted attribute value");
            }
            const char quote = s[pos++];
            const std::size_t end = s.find(quote, pos);
            if (end == std::string_view::npos) {
                return failAt("unterminated attribute value");
            }
            const std::string_view value = s.substr(pos, end - pos);
            if (!entitiesOk(value)) {
                return failAt("bad attribute value");
            }
            if (!e.attributes.emplace(attribute, std::string(value)).second) {
                return failAt("duplicate attribute " + attribute);
            }
            pos = end + 1;
        }
        if (open.empty()) {
            ++roots;
        }
        const std::string cls = e.attributes.contains("class") ? e.attributes.at("class") : "";
        if (!selfClosing) {
            open.emplace_back(e.name, cls);
        }
        result.elements.push_back(std::move(e));
    }
    if (!open.empty()) {
        return failAt("<" + open.back().first + "> is not closed");
    }
    if (roots != 1) {
        return failAt("expected one root element, found " + std::to_string(roots));
    }
    result.ok = true;
    return result;
}

/// Marks of one class inside each lane: lane name -> (number of marks, sum of data-count).
std::map<std::string, std::pair<std::int64_t, std::int64_t>> marksPerLane(const XmlResult& xml,
                                                                          const std::string& cls) {
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> out;
    std::string lane;
    for (const Element& e : xml.elements) {
        if (e.name == "g" && e.attributes.contains("class") && e.attributes.at("class") == "lane") {
            lane = e.attributes.at("data-algorithm");
            out[lane];
        } else if (e.attributes.contains("class") && e.attributes.at("class") == cls) {
            REQUIRE(e.parentClass == "lane");
            out[lane].first += 1;
            out[lane].second += std::stoll(e.attributes.at("data-count"));
        }
    }
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The worked scenarios: the figures tests/algorithms/*_test.cpp assert for each algorithm

TEST_CASE(
    "Explorer: 10/min, 10 at 00:00, 5 at 00:30, 5 at 01:10 gives the algorithm tests' "
    "figures",
    "[explore]") {
    const explore::Replay r = replayInline("10/min", "0s:10 30s:5 70s:5");
    CHECK(admittedPerBatch(r, Algorithm::kFixedWindow) == Counts{10, 0, 5});
    CHECK(admittedPerBatch(r, Algorithm::kSlidingLog) == Counts{10, 0, 5});
    CHECK(admittedPerBatch(r, Algorithm::kSlidingCounter) == Counts{10, 0, 1});  // 8.33 of 10
    CHECK(admittedPerBatch(r, Algorithm::kTokenBucket) == Counts{10, 5, 5});
    CHECK(admittedPerBatch(r, Algorithm::kLeakyBucket) == Counts{10, 5, 5});

    // The buckets admit 15 in [0s, 1m): their nature (a full bucket, then the refill).
    const explore::AlgorithmRun& bucket = runOf(r, Algorithm::kTokenBucket);
    CHECK(bucket.overAdmission == 5);
    CHECK(bucket.peakFrom == 0s);
    CHECK(bucket.bound == 9);
    CHECK(runOf(r, Algorithm::kFixedWindow).overAdmission == 0);
    CHECK(runOf(r, Algorithm::kSlidingLog).peak == 10);

    // Waits of retrying clients: the windows' refusals at 00:30 have retryAfter 30 s (the tests
    // assert it) and pass at 01:00; the buckets refuse nothing.
    CHECK(runOf(r, Algorithm::kFixedWindow).longestWait == 30s);
    CHECK(runOf(r, Algorithm::kFixedWindow).waited == 5);
    CHECK(runOf(r, Algorithm::kSlidingLog).longestWait == 30s);
    CHECK(runOf(r, Algorithm::kTokenBucket).waited == 0);
    CHECK(runOf(r, Algorithm::kLeakyBucket).waited == 0);
    // Sliding counter: the five of 00:30 retry at 01:06 (retryAfter 36 s, asserted by its test),
    // where one passes (10·54 ≤ 9·60); after that every admission needs 6 s more of the previous
    // window's weight to fade, and the four left of 00:30 go first (at 01:12 … 01:30).
    CHECK(runOf(r, Algorithm::kSlidingCounter).longestWait == 60s);
    CHECK(runOf(r, Algorithm::kSlidingCounter).waited == 10);
    for (const explore::AlgorithmRun& run : r.runs) {
        CHECK(run.waitsComplete);
        CHECK(run.never == 0);
    }
}

TEST_CASE(
    "Explorer: 10/min, 5 at 00:00, 5 at 00:30, 5 at 00:40 gives the algorithm tests' "
    "figures",
    "[explore]") {
    const explore::Replay r = replayInline("10/min", "0s:5 30s:5 40s:5");
    CHECK(admittedPerBatch(r, Algorithm::kFixedWindow) == Counts{5, 5, 0});
    CHECK(admittedPerBatch(r, Algorithm::kSlidingLog) == Counts{5, 5, 0});
    CHECK(admittedPerBatch(r, Algorithm::kSlidingCounter) == Counts{5, 5, 0});
    CHECK(admittedPerBatch(r, Algorithm::kTokenBucket) == Counts{5, 5, 5});
    CHECK(admittedPerBatch(r, Algorithm::kLeakyBucket) == Counts{5, 5, 5});
    // The windows' refusals at 00:40 have retryAfter 20 s (fixed window, sliding log) and
    // 26 s (sliding counter), as their tests assert; nothing else competes.
    CHECK(runOf(r, Algorithm::kFixedWindow).longestWait == 20s);
    CHECK(runOf(r, Algorithm::kSlidingLog).longestWait == 20s);
    CHECK(runOf(r, Algorithm::kSlidingCounter).longestWait > 26s - 1ns);
}

TEST_CASE("Explorer: 100/min, 100 at 00:59 and 100 at 01:00 gives the algorithm tests' figures",
          "[explore]") {
    const explore::Replay r = replayInline("100/min", "59s:100 60s:100");
    CHECK(admittedPerBatch(r, Algorithm::kFixedWindow) == Counts{100, 100});
    CHECK(admittedPerBatch(r, Algorithm::kSlidingLog) == Counts{100, 0});
    CHECK(admittedPerBatch(r, Algorithm::kSlidingCounter) == Counts{100, 0});
    CHECK(admittedPerBatch(r, Algorithm::kTokenBucket) == Counts{100, 1});
    CHECK(admittedPerBatch(r, Algorithm::kLeakyBucket) == Counts{100, 1});

    // The fixed window's edge burst: 200 in [59s, 1m59s), its whole design allowance.
    const explore::AlgorithmRun& fixed = runOf(r, Algorithm::kFixedWindow);
    CHECK(fixed.peak == 200);
    CHECK(fixed.peakFrom == 59s);
    CHECK(fixed.overAdmission == 100);
    CHECK(fixed.overAdmission == fixed.bound);
    CHECK(runOf(r, Algorithm::kSlidingLog).overAdmission == 0);
    CHECK(runOf(r, Algorithm::kTokenBucket).overAdmission == 1);

    // Retrying: the sliding log's refusals wait 59 s (retryAfter 59 s in its test); the bucket's
    // 99 refusals pass one per 0.6 s, the last at 01:59 (the 99th token from 0.67 left).
    CHECK(runOf(r, Algorithm::kFixedWindow).waited == 0);
    CHECK(runOf(r, Algorithm::kSlidingLog).longestWait == 59s);
    CHECK(runOf(r, Algorithm::kSlidingLog).waited == 100);
    CHECK(runOf(r, Algorithm::kTokenBucket).longestWait == 59s);
    CHECK(runOf(r, Algorithm::kTokenBucket).waited == 99);
    CHECK(runOf(r, Algorithm::kLeakyBucket).longestWait == 59s);

    SECTION("the boundary-burst generator makes the same traffic") {
        explore::TrafficBuilder builder;
        explore::Generator g;
        g.boundaryBurst = true;
        explore::generate(g, Limit::parse("100/min"), builder);
        const explore::Traffic t = std::move(builder).build();
        REQUIRE(t.requests.size() == 200);
        CHECK(t.requests.front().at == 59s);
        CHECK(t.requests.back().at == 60s);
    }
    SECTION("the command line prints the same figures, as a table and as JSON") {
        const Outcome table = runExplorer({"--rule", "100/min", "--boundary-burst"});
        REQUIRE(table.status == 0);
        CHECK(table.err.empty());
        CHECK(table.out.find("  59s       100           100          100              100"
                             "           100           100\n") != std::string::npos);
        CHECK(table.out.find("  1m        100           100            0                0"
                             "             1             1\n") != std::string::npos);
        CHECK(table.out.find("+100 in [59s, 1m59s)") != std::string::npos);

        const Outcome json = runExplorer({"--rule", "100/min", "--traffic", "59s:100,60s:100",
                                          "--json", "--algorithms", "fixed_window,sliding_log"});
        REQUIRE(json.status == 0);
        const std::size_t fixedAt = json.out.find("\"fixed_window\": {");
        const std::size_t logAt = json.out.find("\"sliding_log\": {");
        REQUIRE(fixedAt != std::string::npos);
        REQUIRE(logAt != std::string::npos);
        CHECK(json.out.find("\"token_bucket\"") == std::string::npos);
        const std::string fixedPart = json.out.substr(fixedAt, logAt - fixedAt);
        const std::string logPart = json.out.substr(logAt);
        CHECK(fixedPart.find("{\"t_ms\": 59000, \"sent\": 100, \"admitted\": 100}") !=
              std::string::npos);
        CHECK(fixedPart.find("{\"t_ms\": 60000, \"sent\": 100, \"admitted\": 100}") !=
              std::string::npos);
        CHECK(fixedPart.find("\"admitted\": 200, \"refused\": 0") != std::string::npos);
        CHECK(logPart.find("{\"t_ms\": 60000, \"sent\": 100, \"admitted\": 0}") !=
              std::string::npos);
        CHECK(logPart.find("\"admitted\": 100, \"refused\": 100") != std::string::npos);
    }
}

// ---------------------------------------------------------------------------------------------
// Over-admission: each algorithm stays within its design bound, and the bounds are reached

TEST_CASE("Explorer: the design bounds on over-admission are reached by the right traffic",
          "[explore]") {
    SECTION("sliding counter: 10 at 00:59, then late in the next window 9 more pass") {
        // At 01:58.9 the previous ten weigh 1.1/60: 10·1.1 ≤ (9 − curr)·60 admits 9.
        const explore::Replay r = replayInline("10/min", "59s:10 1m58.9s:10");
        CHECK(admittedPerBatch(r, Algorithm::kSlidingCounter) == Counts{10, 9});
        const explore::AlgorithmRun& counter = runOf(r, Algorithm::kSlidingCounter);
        CHECK(counter.overAdmission == 9);
        CHECK(counter.overAdmission == counter.bound);
        CHECK(runOf(r, Algorithm::kSlidingLog).overAdmission == 0);
    }
    SECTION("token bucket: a full bucket, then a request per refilled token") {
        // 10/min: a token every 6 s.
        const explore::Replay r =
            replayInline("10/min", "0s:10 6s:1 12s:1 18s:1 24s:1 30s:1 36s:1 42s:1 48s:1 54s:1");
        for (const Algorithm a : {Algorithm::kTokenBucket, Algorithm::kLeakyBucket}) {
            const explore::AlgorithmRun& bucket = runOf(r, a);
            CHECK(bucket.admittedRequests == 19);
            CHECK(bucket.overAdmission == 9);
            CHECK(bucket.overAdmission == bucket.bound);
        }
    }
}

TEST_CASE("Explorer: on random traffic no algorithm goes beyond its design bound", "[explore]") {
    std::mt19937_64 rng(20240607);  // NOLINT(cert-msc32-c,cert-msc51-cpp): reproducible test data
    const std::vector<std::string> rules{"10/min", "7/10s burst 3", "5/s burst 12", "30/min"};
    for (int round = 0; round < 24; ++round) {
        const std::string& rule = rules[static_cast<std::size_t>(round) % rules.size()];
        const Limit limit = Limit::parse(rule);
        explore::TrafficBuilder builder;
        std::uniform_int_distribution<std::int64_t> at(0, 4 * limit.period.count());
        std::uniform_int_distribution<std::int64_t> cost(1, 3);
        std::uniform_int_distribution<std::size_t> key(0, 2);
        const std::array<std::string_view, 3> keys{"k0", "k1", "k2"};
        for (int i = 0; i < 300; ++i) {
            builder.add(Nanos{at(rng)}, keys.at(key(rng)), cost(rng), "random");
        }
        const explore::Replay r =
            explore::replay(limit, std::move(builder).build(),
                            {explore::kAllAlgorithms.begin(), explore::kAllAlgorithms.end()});
        for (const explore::AlgorithmRun& run : r.runs) {
            INFO(rule << ", round " << round << ", " << explore::nameOf(run.algorithm));
            CHECK(run.overAdmission <= run.bound);
            CHECK(run.admittedRequests > 0);
            CHECK(run.admittedRequests < run.sentRequests);
            CHECK(run.waitsComplete);
        }
        // The token bucket and GCRA make the same decisions while the clock never steps back.
        CHECK(runOf(r, Algorithm::kTokenBucket).admitted ==
              runOf(r, Algorithm::kLeakyBucket).admitted);
    }
}

TEST_CASE("Explorer: a cost above the limit is counted as never, not as a wait", "[explore]") {
    explore::TrafficBuilder builder;
    std::istringstream csv("0s,a,11\n0s,a,3\n");
    explore::readCsv(csv, "costs.csv", builder);
    const explore::Replay r =
        explore::replay(Limit::parse("10/min"), std::move(builder).build(),
                        {explore::kAllAlgorithms.begin(), explore::kAllAlgorithms.end()});
    for (const explore::AlgorithmRun& run : r.runs) {
        CHECK(run.never == 1);
        CHECK(run.admittedRequests == 1);
        CHECK(run.admittedUnits == 3);
        CHECK(run.waited == 0);
    }
}

TEST_CASE("Explorer: traffic that outruns the rule stops the retry model and says so",
          "[explore]") {
    // 300 at once against 1/min: a fixed window admits one per window, so the backlog would
    // take five hours; the model stops 100 periods after the last request.
    const explore::Replay r = replayInline("1/min", "0s:300");
    const explore::AlgorithmRun& fixed = runOf(r, Algorithm::kFixedWindow);
    CHECK(fixed.admittedRequests == 1);
    CHECK(fixed.waited == 100);  // one at each window start from 1m to 100m
    CHECK(fixed.stillWaiting == 199);
    CHECK(!fixed.waitsComplete);
    CHECK(fixed.longestWait == 101min);  // their next try, past the horizon
    CHECK(explore::waitText(fixed).rfind("at least 1h41m (100 admitted after a wait, 199 still "
                                         "waiting",
                                         0) == 0);
}

// ---------------------------------------------------------------------------------------------
// The chart

TEST_CASE(
    "Explorer: the SVG chart is well-formed XML with a lane per algorithm and a mark per "
    "admitted batch",
    "[explore]") {
    const explore::Replay r = replayInline("10/min", "0s:10 30s:5 70s:5");
    const std::string svg = explore::svgReport(r, "a <title> & \"quotes\"");
    const XmlResult xml = parseXml(svg);
    INFO(xml.error);
    REQUIRE(xml.ok);
    REQUIRE(!xml.elements.empty());
    CHECK(xml.elements.front().name == "svg");
    CHECK(xml.elements.front().attributes.at("xmlns") == "http://www.w3.org/2000/svg");

    const auto admitted = marksPerLane(xml, "admitted");
    const auto refused = marksPerLane(xml, "refused");
    REQUIRE(admitted.size() == 5);
    for (const explore::AlgorithmRun& run : r.runs) {
        const std::string name(explore::nameOf(run.algorithm));
        INFO(name);
        REQUIRE(admitted.contains(name));
        const std::int64_t batchesWithAdmissions =
            std::count_if(run.batches.begin(), run.batches.end(),
                          [](const explore::Batch& b) { return b.admitted > 0; });
        CHECK(admitted.at(name).first == batchesWithAdmissions);
        CHECK(admitted.at(name).second == run.admittedRequests);
        CHECK(refused.at(name).second == run.sentRequests - run.admittedRequests);
    }
    // Fixed window: bars at 0s and 01:10 admitted, the 00:30 batch refused whole.
    CHECK(admitted.at("fixed_window") == std::pair<std::int64_t, std::int64_t>{2, 15});
    CHECK(refused.at("fixed_window") == std::pair<std::int64_t, std::int64_t>{1, 5});
    CHECK(admitted.at("token_bucket") == std::pair<std::int64_t, std::int64_t>{3, 20});
    CHECK(refused.at("token_bucket").first == 0);

    // The rule's envelope once per lane, and the title escaped.
    const auto envelopes =
        std::count_if(xml.elements.begin(), xml.elements.end(), [](const Element& e) {
            return e.attributes.contains("class") && e.attributes.at("class") == "envelope";
        });
    CHECK(envelopes == 5);
    CHECK(svg.find("a &lt;title&gt; &amp; &quot;quotes&quot;") != std::string::npos);

    SECTION("the checker itself refuses broken XML") {
        CHECK(!parseXml("<svg><g></svg>").ok);
        CHECK(!parseXml("<svg a=\"1\" a=\"2\"/>").ok);
        CHECK(!parseXml("<svg>&nbsp;</svg>").ok);
        CHECK(!parseXml("<svg/><svg/>").ok);
        CHECK(parseXml("<svg><g class=\"lane\"/></svg>").ok);
    }
}

TEST_CASE("Explorer: many batches are drawn and listed per bin of time", "[explore]") {
    // 3 s of 300/s: 900 batches, more than the chart draws apart.
    explore::TrafficBuilder builder;
    explore::Generator g;
    g.steadyCount = 300;
    g.steadyPeriod = 1s;
    g.duration = 3s;
    const Limit rule = Limit::parse("100/s burst 20");
    explore::generate(g, rule, builder);
    const explore::Replay r =
        explore::replay(rule, std::move(builder).build(),
                        {explore::kAllAlgorithms.begin(), explore::kAllAlgorithms.end()});
    REQUIRE(r.runs.front().batches.size() == 900);

    const XmlResult xml = parseXml(explore::svgReport(r));
    INFO(xml.error);
    REQUIRE(xml.ok);
    const auto admitted = marksPerLane(xml, "admitted");
    const auto refused = marksPerLane(xml, "refused");
    for (const explore::AlgorithmRun& run : r.runs) {
        const std::string name(explore::nameOf(run.algorithm));
        INFO(name);
        CHECK(admitted.at(name).first <= static_cast<std::int64_t>(explore::kMaxBars));
        CHECK(admitted.at(name).second == run.admittedRequests);
        CHECK(refused.at(name).second == run.sentRequests - run.admittedRequests);
    }

    const std::string table = explore::tableReport(r);
    CHECK(table.find("(900 batches grouped in 100ms bins [from, to); --json lists every batch)") !=
          std::string::npos);
    // The buckets: 20 at once, then the refill, 0.1 per ms: 9 more by 96.7 ms, then 10 per bin.
    CHECK(table.find("  0s-100ms         30            30           30               30"
                     "            29            29\n") != std::string::npos);
    CHECK(table.find("  total           900           300          300              298"
                     "           319           319\n") != std::string::npos);
}

TEST_CASE("Explorer: --svg writes the chart with only the lanes asked for", "[explore]") {
    const TempDir dir;
    const std::string file = dir.file("chart.svg");
    const Outcome o = runExplorer({"--rule", "100/min", "--boundary-burst", "--algorithms",
                                   "sliding_log,fixed_window", "--svg", file});
    REQUIRE(o.status == 0);
    std::ostringstream content;
    content << std::ifstream(file).rdbuf();
    const std::string svg = content.str();
    const XmlResult xml = parseXml(svg);
    INFO(xml.error);
    REQUIRE(xml.ok);
    const auto admitted = marksPerLane(xml, "admitted");
    REQUIRE(admitted.size() == 2);
    CHECK(admitted.at("fixed_window") == std::pair<std::int64_t, std::int64_t>{2, 200});
    CHECK(admitted.at("sliding_log") == std::pair<std::int64_t, std::int64_t>{1, 100});
    // The lanes come in the order asked for.
    CHECK(svg.find("data-algorithm=\"sliding_log\"") < svg.find("data-algorithm=\"fixed_window\""));
}

// ---------------------------------------------------------------------------------------------
// Input

TEST_CASE("Explorer: times read back as they are printed", "[explore]") {
    for (const Nanos d : {Nanos{0}, Nanos{1}, Nanos{999}, Nanos{1500}, Nanos{250ms}, Nanos{59s},
                          Nanos{70s}, Nanos{1h + 1s}, Nanos{26h}, Nanos{1500ms},
                          Nanos{59s + 999999999ns}, Nanos{983333333ns}}) {
        INFO(d.count() << "ns -> " << explore::formatDuration(d));
        CHECK(explore::parseDuration(explore::formatDuration(d), "test") == d);
    }
    CHECK(explore::formatDuration(70s) == "1m10s");
    CHECK(explore::formatDuration(250ms) == "250ms");
    CHECK(explore::parseDuration("1.5s", "test") == 1500ms);
    CHECK(explore::parseDuration("2MIN", "test") == 2min);
}

TEST_CASE("Explorer: the CSV reader takes time,key,cost lines in any order", "[explore]") {
    std::istringstream csv(
        "time,key,cost\r\n"
        "# a comment\n"
        "\n"
        "1m10s, alice, 2\n"
        "0s,\"b,\"\"ob\"\"\",1\n"
        "0s,alice,1\n");
    explore::TrafficBuilder builder;
    explore::readCsv(csv, "ok.csv", builder);
    const explore::Traffic t = std::move(builder).build();
    REQUIRE(t.requests.size() == 3);
    CHECK(t.keys == std::vector<std::string>{"alice", "b,\"ob\""});
    // Sorted by time; equal times keep the file's order.
    CHECK(t.requests[0].at == 0s);
    CHECK(t.requests[0].key == 1);
    CHECK(t.requests[1].key == 0);
    CHECK(t.requests[2].at == 70s);
    CHECK(t.requests[2].cost == 2);
}

TEST_CASE("Explorer: the CSV reader refuses a malformed line with its number", "[explore]") {
    const auto error = [](const std::string& text) {
        std::istringstream csv(text);
        explore::TrafficBuilder builder;
        try {
            explore::readCsv(csv, "traffic.csv", builder);
        } catch (const explore::InputError& e) {
            return std::string(e.what());
        }
        return std::string("<accepted>");
    };
    const std::string good = "time,key,cost\n0s,a,1\n";
    CHECK(error(good + "30s,a\n") == "traffic.csv:3: expected 3 fields time,key,cost, found 2");
    CHECK(error(good + "# note\n30s,a,1,4\n") ==
          "traffic.csv:4: expected 3 fields time,key,cost, found 4");
    CHECK(error(good + "30x,a,1\n")
              .rfind("traffic.csv:3: unknown time unit 'x' in '30x' (use ns, us, ms, s, min, h, d)",
                     0) == 0);
    CHECK(error(good + "-5s,a,1\n").rfind("traffic.csv:3: negative time '-5s'", 0) == 0);
    CHECK(error(good + "30,a,1\n").rfind("traffic.csv:3: time '30' needs a unit", 0) == 0);
    CHECK(error(good + "30s,a,0\n").rfind("traffic.csv:3: cost '0' is not a whole number", 0) == 0);
    CHECK(error(good + "30s,a,1.5\n").rfind("traffic.csv:3: cost '1.5'", 0) == 0);
    CHECK(error(good + "30s,\"a,1\n").rfind("traffic.csv:3: a quoted field is not closed", 0) == 0);
    CHECK(error(good + "30s,a\"b,1\n").rfind("traffic.csv:3: a quote inside", 0) == 0);
    CHECK(error("0s,a,1\n\n\n1ns,a\n") ==
          "traffic.csv:4: expected 3 fields time,key,cost, found 2");
    CHECK(error(good) == "<accepted>");
}

TEST_CASE("Explorer: bad input gives one message, a non-zero exit and no output", "[explore]") {
    const TempDir dir;
    const std::string chart = dir.file("chart.svg");
    const auto refused = [&](std::vector<std::string> args, int status, const std::string& says) {
        args.emplace_back("--svg");
        args.push_back(chart);
        const Outcome o = runExplorer(args);
        INFO(o.err);
        CHECK(o.status == status);
        CHECK(o.out.empty());
        CHECK(o.err.find(says) != std::string::npos);
        CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
        CHECK(!std::filesystem::exists(chart));
    };
    refused({"--rule", "10/min", "--traffic", "0s:10 30x:5"}, 1,
            "--traffic item 2 '30x:5': unknown time unit 'x'");
    refused({"--rule", "10/min", "--traffic", "-5s:3"}, 1, "negative time '-5s'");
    refused({"--rule", "10/min", "--traffic", "0s:ten"}, 1, "the count after ':'");
    refused({"--rule", "10/fortnight", "--traffic", "0s:1"}, 1, "unknown time unit 'fortnight'");
    refused({"--rule", "10/min", "--traffic", "0s:1", "--algorithms", "fixed_window,bogus"}, 1,
            "unknown algorithm 'bogus'");
    refused({"--rule", "10/min", "--burst", "5@soon"}, 1, "--burst '5@soon'");
    refused({"--rule", "10/min", "--traffic", "0s:1", "--frobnicate"}, 2,
            "unknown option '--frobnicate'");
    refused({"--traffic", "0s:1"}, 2, "--rule is required");
    refused({"--rule", "10/min"}, 2, "no traffic");

    // A CSV file with a bad line in the middle: nothing of the good lines is printed.
    const std::string csv = dir.file("bad.csv", "time,key,cost\n0s,a,1\n30s,a,1\n40s;a;1\n");
    refused({"--rule", "10/min", "--traffic-file", csv}, 1, csv + ":4: expected 3 fields");
    refused({"--rule", "10/min", "--traffic-file", dir.file("missing.csv")}, 1, "cannot open");
}

TEST_CASE("Explorer: --help documents every option, and no arguments run the demo", "[explore]") {
    const Outcome help = runExplorer({"--help"});
    CHECK(help.status == 0);
    for (const char* option :
         {"--rule", "--traffic", "--traffic-file", "--steady", "--duration", "--burst",
          "--boundary-burst", "--algorithms", "--json", "--svg", "--title", "--help"}) {
        CHECK(help.out.find(std::string("\n  ") + option) != std::string::npos);
    }
    const Outcome demo = runExplorer({});
    CHECK(demo.status == 0);
    CHECK(demo.out.find("  1m10s       5             5            5                1"
                        "             5             5\n") != std::string::npos);
}

TEST_CASE("Explorer: the generator spaces a steady rate exactly and adds bursts", "[explore]") {
    const Outcome o = runExplorer({"--rule", "10/min", "--steady", "3/10s", "--duration", "20s",
                                   "--burst", "4@5s", "--json", "--algorithms", "sliding_log"});
    REQUIRE(o.status == 0);
    // 3 per 10 s from 0s: 0, 3.333333333 s, 6.666666666 s, 10 s, … (floor to the nanosecond).
    CHECK(o.out.find("{\"t_ms\": 3333.333333, \"sent\": 1") != std::string::npos);
    CHECK(o.out.find("{\"t_ms\": 5000, \"sent\": 4, \"admitted\": 4}") != std::string::npos);
    CHECK(o.out.find("{\"t_ms\": 10000, \"sent\": 1, \"admitted\": 1}") != std::string::npos);
    CHECK(o.out.find("\"sent\": 10, \"admitted\": 10,") != std::string::npos);
    CHECK(o.out.find("t_ms\": 20000") == std::string::npos);  // [0, duration)
}
