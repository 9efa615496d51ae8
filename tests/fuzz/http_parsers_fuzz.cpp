// libFuzzer target for the HTTP parsers: addresses and networks, forwarding headers (all three
// kinds, trusted by network and by hop count), request paths and their readings, the rule file
// format and the structured-field and JSON writers. Hostile input must never crash, never throw
// from the request-time code (the rule file parser may throw std::invalid_argument, nothing else),
// and the invariants below must hold.
//
//   cmake --preset ci-fuzz
//   cmake --build --preset ci-fuzz --target ratelimit_fuzz_http_parsers
//   mkdir -p /tmp/corpus && build/ci-fuzz/tests/fuzz/ratelimit_fuzz_http_parsers \
//       /tmp/corpus tests/fuzz/corpus/http_parsers -max_total_time=600 -jobs=2

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/http/cidr.hpp>
#include <ratelimit/http/client_key.hpp>
#include <ratelimit/http/headers.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/http/routes.hpp>

namespace {

namespace http = ratelimit::http;

void check(bool condition) {
    if (!condition) {
        std::abort();
    }
}

void fuzzAddresses(std::string_view text) {
    if (const std::optional<http::IpAddress> a = http::IpAddress::parse(text)) {
        // The canonical text parses back to the same address.
        check(http::IpAddress::parse(a->toString()) == *a);
        const http::IpAddress c = a->canonical();
        check(c.canonical() == c);
        if (c == *a) {
            for (const int prefix : {0, 1, 31, 32, 48, 56, 64, 127, 128}) {
                check(http::Cidr(*a, prefix).contains(*a));
            }
        }
    }
    if (const std::optional<http::Cidr> net = http::Cidr::parse(text)) {
        check(net->contains(net->network()));
        check(http::Cidr::parse(net->toString()) == *net);
    }
    (void)http::parseNodeAddress(text);
}

void fuzzIdentity(std::string_view text) {
    // Split the input into header field lines at '\n'.
    std::vector<std::string_view> values;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t end = std::min(text.find('\n', start), text.size());
        values.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    const std::span<const std::string_view> lines(values);
    for (const http::ForwardedHeader header :
         {http::ForwardedHeader::kXForwardedFor, http::ForwardedHeader::kForwarded,
          http::ForwardedHeader::kXRealIp}) {
        http::ClientIdentityOptions byNetwork;
        byNetwork.forwardedHeader = header;
        byNetwork.trustedProxies = {"0.0.0.0/1", "::/1"};
        http::ClientIdentityOptions byHops;
        byHops.forwardedHeader = header;
        byHops.trustedHops = 2;
        for (const auto& options : {byNetwork, byHops}) {
            const http::ClientIdentity id{options};
            const http::ClientKey k = id.identify("10.0.0.1", lines);
            check(k.address.has_value());
            check(!k.key.empty());
            check(k.key.rfind("ip4:", 0) == 0 || k.key.rfind("ip6:", 0) == 0);
        }
    }
    const http::ClientKey peer = http::ClientIdentity{}.identify(text);
    check(!peer.key.empty());
}

void fuzzPath(std::string_view text) {
    const std::string p = http::normalizePath(text);
    check(!p.empty() && p.front() == '/');
    check(p == "/" || p.back() != '/');
    check(p.find("//") == std::string::npos);
    check(p.find("/./") == std::string::npos && p.find("/../") == std::string::npos);
    check(!p.ends_with("/.") && !p.ends_with("/.."));
    // Every reading is a path, the first is normalizePath's, and none comes twice.
    const std::vector<std::string> readings = http::pathReadings(text);
    check(!readings.empty() && readings.size() <= 8 && readings.front() == p);
    for (std::size_t i = 0; i < readings.size(); ++i) {
        check(!readings[i].empty() && readings[i].front() == '/');
        check(readings[i] == "/" || readings[i].back() != '/');
        check(std::find(readings.begin() + static_cast<std::ptrdiff_t>(i) + 1, readings.end(),
                        readings[i]) == readings.end());
    }
}

void fuzzRules(std::string_view text) {
    try {
        const http::RouteTable table = http::RouteTable::parse(text, "fuzz");
        for (const http::RouteRule& r : table.rules()) {
            check(table.matchNormalized(r.method == "*" ? "GET" : r.method, r.pathPrefix, r.tier) !=
                  nullptr);
        }
    } catch (const std::invalid_argument&) {
        // Bad configuration is refused with a message; that is the contract.
    }
}

void fuzzWriters(std::string_view text) {
    std::string sf;
    ratelimit::detail::http_fields::appendSfString(sf, text);
    for (const char c : sf) {
        check(c >= 0x20 && c <= 0x7e);
    }
    const std::string json = http::problemJson(std::span<const std::string_view>(&text, 1), 1);
    for (const char c : json) {
        check(static_cast<unsigned char>(c) >= 0x20);
    }
    ratelimit::Decision d;
    d.retryAfter = std::chrono::nanoseconds{static_cast<std::int64_t>(text.size()) * 977'000'000};
    d.limit = 5;
    const http::QuotaPolicy policy{std::string(text), 5, std::chrono::seconds{60}};
    for (const http::Header& h : http::RateLimitHeaders{}(policy, d, {{}, text})) {
        for (const char c : h.value) {
            check(c >= 0x20 && c <= 0x7e);
        }
        if (h.name == "Retry-After") {
            check(std::stoll(h.value) >= 1);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(data, data + size);
    fuzzAddresses(text);
    fuzzIdentity(text);
    fuzzPath(text);
    fuzzRules(text);
    fuzzWriters(text);
    return 0;
}
