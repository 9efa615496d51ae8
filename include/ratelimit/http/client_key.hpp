#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/detail/ascii.hpp>
#include <ratelimit/detail/http_fields.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/http/cidr.hpp>

namespace ratelimit {
inline namespace v1 {
namespace http {

/// The one forwarding header a deployment's proxies write. Exactly one is trusted: a proxy
/// rewrites or appends to its own header and passes the others through untouched, so trusting a
/// second one lets a client write its own "address" there.
enum class ForwardedHeader {
    /// No proxy: the peer address is the client.
    kNone,
    /// `X-Forwarded-For: client, proxy1, proxy2` (each proxy appends its peer).
    kXForwardedFor,
    /// `Forwarded: for=client, for="[2001:db8::1]:443"` (RFC 7239; only `for=` is read).
    kForwarded,
    /// `X-Real-IP: client` (one address, set by the one proxy in front; the last one when it
    /// added to a client's instead of replacing it).
    kXRealIp,
};

/// The header's field name (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`; empty for kNone).
[[nodiscard]] constexpr std::string_view fieldName(ForwardedHeader header) noexcept {
    switch (header) {
        case ForwardedHeader::kNone:
            return {};
        case ForwardedHeader::kXForwardedFor:
            return "X-Forwarded-For";
        case ForwardedHeader::kForwarded:
            return "Forwarded";
        case ForwardedHeader::kXRealIp:
            return "X-Real-IP";
    }
    return {};
}

/// The IPv6 prefix length a subscriber commonly holds (a /56), and the wider allocation (a /48)
/// of `ClientIdentityOptions::ipv6AggregatePrefix`.
inline constexpr int kDefaultIpv6Prefix = 56;
inline constexpr int kDefaultIpv6AggregatePrefix = 48;

/// How a request's client is told apart from others. Fields only ever get added at the end.
struct ClientIdentityOptions {
    /// The one forwarding header to believe, and only from trusted proxies. Default: none, the
    /// peer address is the client.
    ForwardedHeader forwardedHeader = ForwardedHeader::kNone;
    /// Trusted proxies as networks (`10.0.0.0/8`, `fd00::/8`, `127.0.0.1`): the header is read
    /// only when the peer is one of them, and walked right to left past every trusted hop; the
    /// first untrusted address is the client. Exclusive with `trustedHops`.
    std::vector<std::string> trustedProxies;
    /// Or the number of proxies in front of this server, the peer being the nearest: the client
    /// is the `trustedHops`-th address from the right. Only safe when the server cannot be
    /// reached except through those proxies. 0 (default) … 32.
    int trustedHops = 0;
    /// IPv6 clients are grouped by this prefix length: one subscriber commonly holds a /56 or a
    /// /48, and every address in it costs an attacker nothing. 1 … 128, default 56.
    int ipv6Prefix = kDefaultIpv6Prefix;
    /// Prefix of `ClientKey::aggregateKey` for IPv6 clients, for a second, wider limit on a
    /// whole allocation; 0 turns it off. 0 or 1 … `ipv6Prefix`, default 48.
    int ipv6AggregatePrefix = kDefaultIpv6AggregatePrefix;
};

/// Who a request is, as a limiter key.
struct ClientKey {
    /// `user:<id>` for an authenticated principal; `ip4:<address>` or `ip6:<network>/<prefix>`
    /// otherwise; `hop:<text>` when the client's hop in the forwarding header is not an address
    /// (`unknown`, an obfuscated node, garbage); `peer:<text>` when not even the peer address
    /// could be parsed. `<text>` is at most 128 bytes.
    std::string key;
    /// `ip6:<network>/<aggregate prefix>` for IPv6 clients when enabled, else empty.
    std::string aggregateKey;
    /// The client address (IPv4-mapped and NAT64 reduced to IPv4), when one was found.
    std::optional<IpAddress> address;
    /// `key` names the authenticated principal, not an address.
    bool authenticated = false;
    /// The forwarding header was present but entirely unusable (no member that is not blank),
    /// so the peer address was used.
    bool fellBack = false;
};

}  // namespace http

namespace detail {

/// The most digits of a port number (65535).
inline constexpr std::size_t kMaxPortDigits = 5;

/// The port after an address: one to five decimal digits (its value is not checked).
constexpr bool isPortText(std::string_view port) noexcept {
    return !port.empty() && port.size() <= kMaxPortDigits &&
           std::all_of(port.begin(), port.end(), ascii::isDigit);
}

/// `[2001:db8::1]` or `[2001:db8::1]:443`: brackets hold IPv6 only.
constexpr std::optional<http::IpAddress> parseBracketedAddress(std::string_view text) noexcept {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) {
        return std::nullopt;
    }
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty() && !(rest.front() == ':' && isPortText(rest.substr(1)))) {
        return std::nullopt;
    }
    const std::string_view inner = text.substr(1, close - 1);
    if (inner.find(':') == std::string_view::npos) {
        return std::nullopt;  // brackets hold IPv6 only
    }
    return http::IpAddress::parse(inner);
}

/// `1.2.3.4:80`, the one colon at `colon`.
constexpr std::optional<http::IpAddress> parseV4WithPort(std::string_view text,
                                                         std::size_t colon) noexcept {
    if (!isPortText(text.substr(colon + 1))) {
        return std::nullopt;
    }
    const std::optional<http::IpAddress> a = http::IpAddress::parse(text.substr(0, colon));
    return a && a->isV4() ? a : std::nullopt;
}

}  // namespace detail

namespace http {

/// An address as it appears in a forwarding header or a peer string: `1.2.3.4`, `1.2.3.4:80`,
/// `::1`, `fe80::1%eth0`, `[2001:db8::1]`, `[2001:db8::1]:443`, with optional surrounding
/// spaces. Returns nullopt for anything else (`unknown`, `_hidden`, garbage); never throws.
[[nodiscard]] constexpr std::optional<IpAddress> parseNodeAddress(std::string_view text) noexcept {
    text = detail::http_fields::trimOws(text);
    if (!text.empty() && text.front() == '[') {
        return detail::parseBracketedAddress(text);
    }
    const std::size_t colon = text.find(':');
    if (colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
        return detail::parseV4WithPort(text, colon);  // one colon: IPv4 with a port
    }
    return IpAddress::parse(text);
}

}  // namespace http

namespace detail {

/// A tchar, or ':' '[' ']' that some proxies write unquoted.
constexpr bool isForwardedTokenChar(char c) noexcept {
    return http_fields::isTokenChar(c) || c == ':' || c == '[' || c == ']';
}

/// The value of one pair: a quoted-string, unquoted, or a token; nullopt when malformed.
inline std::optional<std::string> forwardedValue(std::string_view raw) {
    if (!raw.empty() && raw.front() == '"') {
        return http_fields::unquote(raw);
    }
    if (raw.empty() || !std::all_of(raw.begin(), raw.end(), isForwardedTokenChar)) {
        return std::nullopt;
    }
    return std::string(raw);
}

/// The `for=` value of one `Forwarded` element (RFC 7239 section 4), unquoted; nullopt when the
/// element is malformed or has no (or more than one) `for`.
inline std::optional<std::string> forwardedFor(std::string_view element) {
    std::optional<std::string> found;
    std::size_t pos = 0;
    while (pos <= element.size()) {
        // One pair: token "=" ( token / quoted-string ), pairs separated by ';'.
        const std::size_t end = http_fields::findUnquoted(element, pos, ';').end;
        const std::string_view pair = http_fields::trimOws(element.substr(pos, end - pos));
        const std::size_t eq = pair.find('=');
        if (eq == std::string_view::npos || eq == 0) {
            return std::nullopt;
        }
        std::optional<std::string> value = forwardedValue(pair.substr(eq + 1));
        if (!value) {
            return std::nullopt;
        }
        if (ascii::equalsIgnoreCase(pair.substr(0, eq), "for")) {
            if (found) {
                return std::nullopt;
            }
            found = std::move(value);
        }
        if (end >= element.size()) {
            break;
        }
        pos = end + 1;
    }
    return found;
}

/// One hop of a forwarding header: the client or proxy a proxy wrote down, as text (a `for=`
/// value unquoted, or the member itself when it has no usable one), and its address when it is
/// one.
struct ForwardedHop {
    std::string text;
    std::optional<http::IpAddress> address;
};

/// The hop of one member of a `Forwarded` field: only a well-formed element's `for=` names an
/// address, so a malformed one that happens to read as an address (a bare `10.0.0.1`) is not
/// taken for a proxy.
inline ForwardedHop forwardedElementHop(std::string_view member) {
    std::optional<std::string> node = forwardedFor(member);
    if (!node || node->empty()) {
        return {std::string(member), std::nullopt};
    }
    std::optional<http::IpAddress> address = http::parseNodeAddress(*node);
    return {std::move(*node), address};
}

}  // namespace detail

namespace http {

/// Finds the client of a request from its peer address and its one trusted forwarding header,
/// and turns it into a limiter key.
///
/// The header is read only when the peer is a trusted proxy (or, with `trustedHops`, always),
/// and walked right to left: each proxy appends the address it saw, so only the entries the
/// trusted proxies wrote are believed. The first hop that is not a trusted proxy's address is
/// the client, and nothing a client put left of it is ever read: the members are found from the
/// right (`X-Forwarded-For` has no quoted strings; `Forwarded`'s are matched right to left), so
/// a stray quote on the left cannot merge them. A client hop that is not an address is keyed as
/// itself (`hop:<text>`), never as the proxy; only a header with no member at all falls back to
/// the peer. Nothing here throws on hostile input.
///
/// Thread safety: thread-compatible; the const members may be called concurrently.
class ClientIdentity {
public:
    /// Throws: `std::invalid_argument` naming the `ClientIdentityOptions` field that is out of
    /// range, a trusted proxy that is not a network, or a forwarding header without a way to
    /// trust it (neither `trustedProxies` nor `trustedHops`), or both ways at once.
    explicit ClientIdentity(ClientIdentityOptions options = {})
        : options_(std::move(options)),
          trusted_(options_.trustedProxies, "ClientIdentityOptions.trustedProxies") {
        const auto fail = [](const std::string& what) {
            detail::throwInvalidArgument("ClientIdentityOptions." + what);
        };
        if (options_.ipv6Prefix < 1 || options_.ipv6Prefix > 128) {
            fail(detail::formatted("ipv6Prefix must be in 1..128 (got {})", {options_.ipv6Prefix}));
        }
        if (options_.ipv6AggregatePrefix < 0 ||
            options_.ipv6AggregatePrefix > options_.ipv6Prefix) {
            fail(detail::formatted("ipv6AggregatePrefix must be 0 or in 1..ipv6Prefix (got {})",
                                   {options_.ipv6AggregatePrefix}));
        }
        if (options_.trustedHops < 0 || options_.trustedHops > 32) {
            fail(
                detail::formatted("trustedHops must be in 0..32 (got {})", {options_.trustedHops}));
        }
        const bool byNetwork = !trusted_.empty();
        const bool byHops = options_.trustedHops > 0;
        if (options_.forwardedHeader == ForwardedHeader::kNone) {
            if (byNetwork || byHops) {
                fail(
                    "forwardedHeader is kNone, so trustedProxies and trustedHops would be "
                    "ignored; name the header your proxies write");
            }
        } else if (byNetwork == byHops) {
            fail(std::string(byNetwork ? "trustedProxies and trustedHops are both set"
                                       : "forwardedHeader is set but neither trustedProxies "
                                         "nor trustedHops says whom to believe") +
                 " (set exactly one)");
        }
    }

    /// The header to pass to `clientAddress`/`identify` (empty when none is trusted).
    [[nodiscard]] std::string_view headerName() const noexcept {
        return fieldName(options_.forwardedHeader);
    }

    /// The client's address: `peer` is the connection's peer address (any form
    /// `parseNodeAddress` reads), `headerValues` every value of the `headerName()` field in the
    /// order received (empty when absent). nullopt when `peer` itself is not an address, or when
    /// the client's hop in the header is not one (`identify` keys it by its text). Sets
    /// `*fellBack` when the header was present but had no member at all.
    [[nodiscard]] std::optional<IpAddress> clientAddress(
        std::string_view peer, std::span<const std::string_view> headerValues,
        bool* fellBack = nullptr) const {
        const Found found = find(peer, headerValues);
        if (fellBack != nullptr) {
            *fellBack = found.fellBack;
        }
        return found.address;
    }

    /// The limiter key of a request. Pass `authenticatedId` only once the application has
    /// verified it (a session, a checked signature, a known API key's id): an unverified key or
    /// user id would hand an attacker a fresh bucket per invented value. Use a stable id rather
    /// than the secret itself, since keys may reach a shared store.
    [[nodiscard]] ClientKey identify(std::string_view peer,
                                     std::span<const std::string_view> headerValues,
                                     std::optional<std::string_view> authenticatedId = {}) const {
        const Found found = find(peer, headerValues);
        ClientKey out;
        out.address = found.address;
        out.fellBack = found.fellBack;
        if (authenticatedId) {
            out.key = std::string("user:").append(*authenticatedId);
            out.authenticated = true;
            return out;
        }
        if (!out.address) {
            out.key = found.hop ? std::string("hop:").append(found.hop->substr(0, kMaxKeyText))
                                : std::string("peer:").append(peer.substr(0, kMaxKeyText));
            return out;
        }
        out.key = addressKey(*out.address, options_.ipv6Prefix);
        if (!out.address->isV4() && options_.ipv6AggregatePrefix > 0) {
            out.aggregateKey = addressKey(*out.address, options_.ipv6AggregatePrefix);
        }
        return out;
    }

    /// `identify` without a forwarding header (or with one value).
    [[nodiscard]] ClientKey identify(std::string_view peer, std::string_view headerValue = {},
                                     std::optional<std::string_view> authenticatedId = {}) const {
        if (headerValue.empty()) {
            return identify(peer, std::span<const std::string_view>{}, authenticatedId);
        }
        return identify(peer, std::span<const std::string_view>(&headerValue, 1), authenticatedId);
    }

    [[nodiscard]] const ClientIdentityOptions& options() const noexcept { return options_; }

private:
    /// The most bytes of a hop's or peer's text that go into a key.
    static constexpr std::size_t kMaxKeyText = 128;

    /// The client as found: its address, or the text of its hop when that is not an address
    /// (neither: the peer is not an address).
    struct Found {
        std::optional<IpAddress> address;
        std::optional<std::string> hop;
        bool fellBack = false;
    };

    [[nodiscard]] Found find(std::string_view peer,
                             std::span<const std::string_view> headerValues) const {
        const std::optional<IpAddress> peerAddress = parseNodeAddress(peer);
        if (!peerAddress || options_.forwardedHeader == ForwardedHeader::kNone ||
            headerValues.empty() ||
            (options_.trustedHops == 0 && !trusted_.contains(*peerAddress))) {
            // No header, or a peer anyone could be: only proxies' headers count.
            return {canonical(peerAddress), std::nullopt, false};
        }
        std::vector<detail::ForwardedHop> hops = forwardedHops(headerValues);
        if (hops.empty()) {
            return {canonical(peerAddress), std::nullopt, true};
        }
        detail::ForwardedHop& client = hops[clientHop(hops)];
        if (client.address) {
            return {canonical(client.address), std::nullopt, false};
        }
        return {std::nullopt, std::move(client.text), false};
    }

    /// The hops of the trusted header, left (furthest) to right (nearest), blank members left
    /// out (X-Real-IP: only its last member, what the proxy in front wrote).
    [[nodiscard]] std::vector<detail::ForwardedHop> forwardedHops(
        std::span<const std::string_view> headerValues) const {
        std::vector<std::string_view> members;
        for (const std::string_view v : headerValues) {
            if (options_.forwardedHeader == ForwardedHeader::kForwarded) {
                detail::http_fields::splitListFromRight(v, members);
            } else {
                detail::http_fields::splitAtCommas(v, members);
            }
        }
        std::vector<detail::ForwardedHop> hops;
        for (std::string_view m : members) {
            m = detail::http_fields::trimOws(m);
            if (m.empty()) {
                continue;
            }
            if (options_.forwardedHeader == ForwardedHeader::kForwarded) {
                hops.push_back(detail::forwardedElementHop(m));
            } else {
                hops.push_back({std::string(m), parseNodeAddress(m)});
            }
        }
        if (options_.forwardedHeader == ForwardedHeader::kXRealIp && hops.size() > 1) {
            hops.erase(hops.begin(), hops.end() - 1);
        }
        return hops;
    }

    /// The index of the client's hop in `hops` (not empty). With `trustedHops`: the
    /// `trustedHops`-th from the right (the leftmost when there are fewer). With
    /// `trustedProxies`: walking right to left, the first hop that is not a trusted proxy's
    /// address (or the leftmost).
    [[nodiscard]] std::size_t clientHop(const std::vector<detail::ForwardedHop>& hops) const {
        if (options_.trustedHops > 0) {
            const auto n = static_cast<std::size_t>(options_.trustedHops);
            return hops.size() >= n ? hops.size() - n : 0;
        }
        std::size_t i = hops.size() - 1;
        while (i > 0 && hops[i].address && trusted_.contains(*hops[i].address)) {
            --i;
        }
        return i;
    }

    static std::optional<IpAddress> canonical(const std::optional<IpAddress>& a) noexcept {
        return a ? std::optional<IpAddress>(a->canonical()) : std::nullopt;
    }

    static std::string addressKey(const IpAddress& a, int ipv6Prefix) {
        if (a.isV4()) {
            return std::string("ip4:").append(a.toString());
        }
        return std::string("ip6:")
            .append(a.masked(ipv6Prefix).toString())
            .append("/")
            .append(detail::Decimal(ipv6Prefix));
    }

    ClientIdentityOptions options_;
    CidrSet trusted_;
};

}  // namespace http
}  // namespace v1
}  // namespace ratelimit
