// libFuzzer target for the HTTP parsers: addresses and networks, forwarding headers (all three
// kinds, trusted by network and by hop count; junk left of the client's hop never changes its
// key), request paths and their readings, the rule file format and the structured-field and
// JSON writers. Hostile input must never crash, never throw from the request-time code (the rule
// file parser may throw std::invalid_argument, nothing else), and the invariants below must
// hold.
//
//   cmake --preset ci-fuzz
//   cmake --build --preset ci-fuzz --target ratelimit_fuzz_http_parsers
//   mkdir -p /tmp/corpus && build/ci-fuzz/tests/fuzz/ratelimit_fuzz_http_parsers \
//       /tmp/corpus tests/fuzz/corpus/http_parsers -max_total_time=600 -jobs=2

#include <algorithm>
#include <array>
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

#include "support/forwarded_junk.hpp"

namespace {

namespace http = ratelimit::http;
using ratelimit_test::withJunkOnTheLeft;

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
            const bool hop = k.key.rfind("hop:", 0) == 0;
            check(k.address.has_value() != hop);
            check(hop || k.key.rfind("ip4:", 0) == 0 || k.key.rfind("ip6:", 0) == 0);
            check(k.key.size() <= 4 + 128 || !hop);
        }
    }
    const http::ClientKey peer = http::ClientIdentity{}.identify(text);
    check(!peer.key.empty());
}

/// `text` without the bytes in `drop`.
std::string without(std::string_view text, std::string_view drop) {
    std::string out;
    for (const char c : text) {
        if (drop.find(c) == std::string_view::npos) {
            out.push_back(c);
        }
    }
    return out;
}

/// How a proxy writes `address` into `header`.
std::string asHop(http::ForwardedHeader header, std::string_view address) {
    if (header != http::ForwardedHeader::kForwarded) {
        return std::string(address);
    }
    return address.find(':') == std::string_view::npos
               ? "for=" + std::string(address) + ";proto=https"
               : "for=\"" + std::string(address) + "\"";
}

/// The client's hop as a trusted proxy wrote it: an untrusted address, or text that is no
/// address at all (`x…` never parses as one; a Forwarded element starting `x;` has no `for=`).
std::string clientHop(http::ForwardedHeader header, std::string_view text, bool address) {
    static constexpr std::array<std::string_view, 5> kClients{
        "198.51.100.77", "203.0.113.5:8080", "[2001:db8::1]:443", "2001:db8::2", "192.0.2.1"};
    if (address) {
        return asHop(header, kClients[text.size() % kClients.size()]);
    }
    if (header != http::ForwardedHeader::kForwarded) {
        return "x" + without(text, ",\n");
    }
    return text.size() % 2 == 0 ? "for=\"x" + without(text, "\"\\\n") + "\""
                                : "x;" + without(text, "\",\n");
}

std::string keyOf(const http::ClientIdentity& id, const std::vector<std::string>& lines) {
    const std::vector<std::string_view> views(lines.begin(), lines.end());
    return id.identify("10.0.0.1", std::span<const std::string_view>(views)).key;
}

/// Whatever a client puts left of the first untrusted hop never changes the key. Byte 0 picks
/// the header, the trusted proxies right of the client (0…3), junk on its own lines or not and
/// the client hop's form; byte 1 where the rest splits into the hop's text and the junk.
void fuzzLeftJunk(std::string_view text) {
    if (text.size() < 2) {
        return;
    }
    static constexpr std::array<http::ForwardedHeader, 3> kHeaders{
        http::ForwardedHeader::kXForwardedFor, http::ForwardedHeader::kForwarded,
        http::ForwardedHeader::kXRealIp};
    static constexpr std::array<std::string_view, 4> kProxies{"10.0.0.3", "10.20.30.40:81",
                                                              "[fd00::7]:443", "fd00::8"};
    const unsigned control = static_cast<unsigned char>(text[0]);
    const http::ForwardedHeader header = kHeaders[control % 3];
    const bool realIp = header == http::ForwardedHeader::kXRealIp;
    const unsigned proxies = realIp ? 0 : (control / 3) % 4;
    const bool ownLine = realIp || (control / 12) % 2 == 1;
    const std::string_view rest = text.substr(2);
    const std::size_t split =
        std::min<std::size_t>(static_cast<unsigned char>(text[1]), rest.size());
    std::string suffix = clientHop(header, rest.substr(0, split), (control / 24) % 2 == 1);
    for (unsigned i = 0; i < proxies; ++i) {
        suffix.append(", ").append(asHop(header, kProxies[(control / 48 + i) % kProxies.size()]));
    }
    http::ClientIdentityOptions byNetwork;
    byNetwork.forwardedHeader = header;
    byNetwork.trustedProxies = {"10.0.0.0/8", "fd00::/8"};
    http::ClientIdentityOptions byHops;
    byHops.forwardedHeader = header;
    byHops.trustedHops = static_cast<int>(proxies) + 1;
    for (const auto& options : {byNetwork, byHops}) {
        const http::ClientIdentity id{options};
        const std::string alone = keyOf(id, {suffix});
        check(alone != "ip4:10.0.0.1");  // never the proxy's bucket
        check(keyOf(id, withJunkOnTheLeft(rest.substr(split), suffix, ownLine)) == alone);
    }
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
            // Every rule is in its own set, whose rules share its route and differ in name.
            const std::span<const std::size_t> set = table.setOf(r);
            const auto self = static_cast<std::size_t>(&r - table.rules().data());
            check(std::find(set.begin(), set.end(), self) != set.end());
            for (const std::size_t i : set) {
                const http::RouteRule& other = table.rules()[i];
                check(other.method == r.method && other.pathPrefix == r.pathPrefix &&
                      other.tier == r.tier && (i == self || other.name != r.name));
            }
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
    fuzzLeftJunk(text);
    fuzzPath(text);
    fuzzRules(text);
    fuzzWriters(text);
    return 0;
}
