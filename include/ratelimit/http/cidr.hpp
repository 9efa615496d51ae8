#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/detail/ascii.hpp>
#include <ratelimit/detail/throw.hpp>

namespace ratelimit {
inline namespace v1 {

namespace detail::ip {
/// Bytes of an IPv4 and of an IPv6 address.
inline constexpr std::size_t kV4Bytes = 4;
inline constexpr std::size_t kV6Bytes = 16;
/// 16-bit groups of IPv6 text (RFC 4291 section 2.2) and the hex digits of one.
inline constexpr std::size_t kV6Groups = 8;
inline constexpr std::size_t kMaxGroupDigits = 4;
/// Where an IPv4 address sits inside an IPv6 one (the last four bytes, after a /96 prefix).
inline constexpr std::size_t kEmbeddedV4Offset = kV6Bytes - kV4Bytes;
inline constexpr int kEmbeddedV4PrefixLength = static_cast<int>(kEmbeddedV4Offset) * 8;
/// Largest dotted-quad part and its most digits.
inline constexpr unsigned kMaxOctet = 255;
inline constexpr std::size_t kMaxOctetDigits = 3;
inline constexpr unsigned kByteMask = 0xff;
/// `gap` when an IPv6 text has no `::`.
inline constexpr std::size_t kNoGap = kV6Bytes;
}  // namespace detail::ip

namespace http {

/// An IPv4 or IPv6 address, parsed from text without any system call.
///
/// IPv4 is kept as its four bytes; IPv6 as sixteen. The zone id of a scoped IPv6 address
/// (`fe80::1%eth0`) is dropped: it names an interface of this host, not a client.
/// `canonical()` reduces the IPv6 forms that carry an IPv4 client (IPv4-mapped `::ffff:0:0/96`
/// and the NAT64 well-known prefix `64:ff9b::/96`) to that IPv4 address.
/// Thread safety: thread-compatible value type.
class IpAddress {
public:
    enum class Family : std::uint8_t { kV4, kV6 };

    /// `0.0.0.0`.
    constexpr IpAddress() noexcept = default;

    /// The address spelled by `text`: dotted-quad IPv4 (four decimal parts 0…255, no leading
    /// zeros, which some parsers read as octal) or IPv6 (RFC 4291 text forms: `::`, a trailing
    /// dotted quad, an optional `%zone`). No brackets, no port, no surrounding spaces.
    /// Returns nullopt for anything else; never throws.
    [[nodiscard]] static constexpr std::optional<IpAddress> parse(std::string_view text) noexcept {
        if (text.find(':') != std::string_view::npos) {
            return parseV6(text);
        }
        return parseV4(text);
    }

    /// An IPv4 address from its four bytes in network order.
    [[nodiscard]] static constexpr IpAddress v4(std::uint8_t a, std::uint8_t b, std::uint8_t c,
                                                std::uint8_t d) noexcept {
        IpAddress ip;
        ip.family_ = Family::kV4;
        ip.bytes_[0] = a;
        ip.bytes_[1] = b;
        ip.bytes_[2] = c;
        ip.bytes_[3] = d;
        return ip;
    }

    /// An IPv6 address from its sixteen bytes in network order.
    [[nodiscard]] static constexpr IpAddress v6(const std::array<std::uint8_t, 16>& b) noexcept {
        IpAddress ip;
        ip.family_ = Family::kV6;
        ip.bytes_ = b;
        return ip;
    }

    [[nodiscard]] constexpr Family family() const noexcept { return family_; }
    [[nodiscard]] constexpr bool isV4() const noexcept { return family_ == Family::kV4; }
    /// 4 for IPv4, 16 for IPv6.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return isV4() ? 4 : 16; }
    /// The address bits, network order; only the first `size()` bytes are meaningful.
    [[nodiscard]] constexpr const std::array<std::uint8_t, 16>& bytes() const noexcept {
        return bytes_;
    }

    /// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`) or NAT64 (`64:ff9b::a.b.c.d`)
    /// address; any other address unchanged.
    [[nodiscard]] constexpr IpAddress canonical() const noexcept {
        if (isV4()) {
            return *this;
        }
        using detail::ip::kEmbeddedV4Offset;
        // The /96 prefixes as their RFCs define them: IPv4-mapped `::ffff:0:0/96` (RFC 4291
        // section 2.5.5.2) and the NAT64 well-known prefix `64:ff9b::/96` (RFC 6052 section 2.1).
        // NOLINTBEGIN(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)
        constexpr std::array<std::uint8_t, kEmbeddedV4Offset> kMapped{0, 0, 0, 0, 0,    0,
                                                                      0, 0, 0, 0, 0xff, 0xff};
        constexpr std::array<std::uint8_t, kEmbeddedV4Offset> kNat64{0, 0x64, 0xff, 0x9b, 0, 0,
                                                                     0, 0,    0,    0,    0, 0};
        // NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)
        if (std::equal(kMapped.begin(), kMapped.end(), bytes_.begin()) ||
            std::equal(kNat64.begin(), kNat64.end(), bytes_.begin())) {
            return v4(bytes_[kEmbeddedV4Offset], bytes_[kEmbeddedV4Offset + 1],
                      bytes_[kEmbeddedV4Offset + 2], bytes_[kEmbeddedV4Offset + 3]);
        }
        return *this;
    }

    /// The address with every bit after the first `prefix` cleared (`prefix` is clamped to the
    /// family's width).
    [[nodiscard]] constexpr IpAddress masked(int prefix) const noexcept {
        IpAddress out = *this;
        const int width = static_cast<int>(size()) * 8;
        const int keep = prefix < 0 ? 0 : (prefix > width ? width : prefix);
        for (int bit = keep; bit < width; ++bit) {
            out.bytes_[static_cast<std::size_t>(bit / 8)] &=
                static_cast<std::uint8_t>(~(0x80U >> static_cast<unsigned>(bit % 8)));
        }
        return out;
    }

    /// The canonical text: dotted quad, or RFC 5952 IPv6 (lower case, the longest run of two
    /// or more zero groups as `::`, the first such run on a tie). No zone id.
    [[nodiscard]] std::string toString() const { return isV4() ? v4String() : v6String(); }

    friend constexpr bool operator==(const IpAddress&, const IpAddress&) noexcept = default;

private:
    using Groups = std::array<unsigned, detail::ip::kV6Groups>;

    /// A run of zero groups: where it starts and how many groups it covers.
    struct ZeroRun {
        std::size_t start = detail::ip::kV6Groups;
        std::size_t length = 1;  // a single zero group is never shortened
    };

    [[nodiscard]] std::string v4String() const {
        std::string out;
        for (std::size_t i = 0; i < detail::ip::kV4Bytes; ++i) {
            if (i > 0) {
                out.push_back('.');
            }
            out.append(std::to_string(bytes_[i]));
        }
        return out;
    }

    [[nodiscard]] constexpr Groups groups() const noexcept {
        Groups groups{};
        for (std::size_t i = 0; i < groups.size(); ++i) {
            groups[i] = (unsigned{bytes_[2 * i]} << 8U) | bytes_[2 * i + 1];
        }
        return groups;
    }

    /// The longest run of zero groups, the first on a tie; `start == kV6Groups` when no run is
    /// longer than one group.
    static constexpr ZeroRun longestZeroRun(const Groups& groups) noexcept {
        ZeroRun best;
        for (std::size_t i = 0; i < groups.size();) {
            if (groups[i] != 0) {
                ++i;
                continue;
            }
            std::size_t j = i;
            while (j < groups.size() && groups[j] == 0) {
                ++j;
            }
            if (j - i > best.length) {
                best = {i, j - i};
            }
            i = j;
        }
        return best;
    }

    /// Appends `group` in lower-case hex without leading zeros.
    static void appendGroup(std::string& out, unsigned group) {
        std::array<char, detail::ip::kMaxGroupDigits> digits{};
        const std::to_chars_result r =
            std::to_chars(digits.data(), digits.data() + digits.size(), group, 16);
        out.append(digits.data(), r.ptr);
    }

    [[nodiscard]] std::string v6String() const {
        const Groups g = groups();
        const ZeroRun zeros = longestZeroRun(g);
        std::string out;
        for (std::size_t i = 0; i < g.size(); ++i) {
            if (i == zeros.start) {
                out.append(i == 0 ? "::" : ":");
                i += zeros.length - 1;
                continue;
            }
            appendGroup(out, g[i]);
            if (i + 1 != g.size()) {
                out.push_back(':');
            }
        }
        return out;
    }

    static constexpr std::optional<IpAddress> parseV4(std::string_view text) noexcept {
        std::array<std::uint8_t, detail::ip::kV4Bytes> parts{};
        std::size_t pos = 0;
        for (std::size_t part = 0; part < parts.size(); ++part) {
            if (part > 0) {
                if (pos >= text.size() || text[pos] != '.') {
                    return std::nullopt;
                }
                ++pos;
            }
            const std::size_t start = pos;
            unsigned value = 0;
            while (pos < text.size() && detail::ascii::isDigit(text[pos]) &&
                   pos - start < detail::ip::kMaxOctetDigits) {
                value = value * 10 + static_cast<unsigned>(text[pos] - '0');
                ++pos;
            }
            const std::size_t digits = pos - start;
            if (digits == 0 || value > detail::ip::kMaxOctet ||
                (digits > 1 && text[start] == '0')) {
                return std::nullopt;
            }
            parts[part] = static_cast<std::uint8_t>(value);
        }
        if (pos != text.size()) {
            return std::nullopt;
        }
        return v4(parts[0], parts[1], parts[2], parts[3]);
    }

    /// `text` without its `%zone`; nullopt for an empty zone id.
    static constexpr std::optional<std::string_view> withoutZone(std::string_view text) noexcept {
        const std::size_t zone = text.find('%');
        if (zone == std::string_view::npos) {
            return text;
        }
        if (zone + 1 == text.size()) {
            return std::nullopt;  // an empty zone id
        }
        return text.substr(0, zone);
    }

    /// One 16-bit group: one to four hex digits.
    static constexpr std::optional<unsigned> parseGroup(std::string_view piece) noexcept {
        if (piece.empty() || piece.size() > detail::ip::kMaxGroupDigits) {
            return std::nullopt;
        }
        unsigned group = 0;
        for (const char c : piece) {
            const int v = detail::ascii::hexValue(c);
            if (v < 0) {
                return std::nullopt;
            }
            group = (group << 4U) | static_cast<unsigned>(v);
        }
        return group;
    }

    /// The bytes of an IPv6 text as they are read, before `::` is expanded.
    struct V6Parts {
        std::array<std::uint8_t, detail::ip::kV6Bytes> bytes{};
        std::size_t filled = 0;                // bytes written so far
        std::size_t gap = detail::ip::kNoGap;  // byte index where `::` stood

        /// A trailing dotted quad fills the last four bytes.
        constexpr bool appendQuad(std::string_view piece) noexcept {
            const std::optional<IpAddress> quad = parseV4(piece);
            if (!quad || filled + detail::ip::kV4Bytes > bytes.size()) {
                return false;
            }
            for (std::size_t i = 0; i < detail::ip::kV4Bytes; ++i) {
                bytes[filled++] = quad->bytes_[i];
            }
            return true;
        }

        constexpr bool appendGroup(std::string_view piece) noexcept {
            const std::optional<unsigned> group = parseGroup(piece);
            if (!group || filled + 2 > bytes.size()) {
                return false;
            }
            bytes[filled++] = static_cast<std::uint8_t>(*group >> 8U);
            bytes[filled++] = static_cast<std::uint8_t>(*group & detail::ip::kByteMask);
            return true;
        }

        /// Consumes the `:` after a group at `text[pos]`, and a second one that makes `::`.
        /// False for a single trailing `:` or a second `::`.
        constexpr bool consumeSeparator(std::string_view text, std::size_t& pos) noexcept {
            ++pos;  // the ':'
            if (pos == text.size()) {
                return false;  // a single trailing ':'
            }
            if (text[pos] != ':') {
                return true;
            }
            if (gap != detail::ip::kNoGap) {
                return false;  // a second "::"
            }
            gap = filled;
            ++pos;
            return true;
        }

        /// The address, with the bytes after the gap moved to the end.
        [[nodiscard]] constexpr std::optional<IpAddress> address() const noexcept {
            if (gap == detail::ip::kNoGap) {
                return filled == bytes.size() ? std::optional<IpAddress>(v6(bytes)) : std::nullopt;
            }
            if (filled == bytes.size()) {
                return std::nullopt;  // "::" must stand for at least one group
            }
            std::array<std::uint8_t, detail::ip::kV6Bytes> result{};
            for (std::size_t i = 0; i < gap; ++i) {
                result[i] = bytes[i];
            }
            const std::size_t tail = filled - gap;
            for (std::size_t i = 0; i < tail; ++i) {
                result[result.size() - tail + i] = bytes[gap + i];
            }
            return v6(result);
        }
    };

    static constexpr std::optional<IpAddress> parseV6(std::string_view zoned) noexcept {
        const std::optional<std::string_view> bare = withoutZone(zoned);
        if (!bare) {
            return std::nullopt;
        }
        const std::string_view text = *bare;
        V6Parts parts;
        std::size_t pos = 0;
        if (text.starts_with("::")) {
            parts.gap = 0;
            pos = 2;
        } else if (text.starts_with(':')) {
            return std::nullopt;
        }
        while (pos < text.size()) {
            const std::size_t nextColon = text.find(':', pos);
            const std::string_view piece = text.substr(
                pos, nextColon == std::string_view::npos ? text.size() - pos : nextColon - pos);
            if (nextColon == std::string_view::npos && piece.find('.') != std::string_view::npos) {
                if (!parts.appendQuad(piece)) {
                    return std::nullopt;
                }
                break;
            }
            if (!parts.appendGroup(piece)) {
                return std::nullopt;
            }
            pos += piece.size();
            if (pos == text.size()) {
                break;
            }
            if (!parts.consumeSeparator(text, pos)) {
                return std::nullopt;
            }
        }
        return parts.address();
    }

    std::array<std::uint8_t, 16> bytes_{};
    Family family_ = Family::kV4;
};

/// A network: an address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`).
/// Thread safety: thread-compatible value type.
class Cidr {
public:
    /// `<address>[/<prefix>]`: without a prefix, the single address. An IPv4-mapped IPv6
    /// network (`::ffff:10.0.0.0/104`) is read as the IPv4 network it maps. Host bits after the
    /// prefix must be zero (`10.0.0.1/8` is refused, not silently widened). Returns nullopt for
    /// anything else; never throws.
    [[nodiscard]] static constexpr std::optional<Cidr> parse(std::string_view text) noexcept {
        const std::size_t slash = text.find('/');
        const std::optional<IpAddress> address = IpAddress::parse(text.substr(0, slash));
        if (!address) {
            return std::nullopt;
        }
        const int width = static_cast<int>(address->size()) * 8;
        int prefix = width;
        if (slash != std::string_view::npos) {
            const std::string_view digits = text.substr(slash + 1);
            const std::int64_t value = detail::ascii::decimalValue(digits, width);
            if (value < 0 || (digits.size() > 1 && digits[0] == '0')) {
                return std::nullopt;  // not a length up to the width, or a leading zero
            }
            prefix = static_cast<int>(value);
        }
        if (address->masked(prefix) != *address) {
            return std::nullopt;
        }
        // Byte 10 is 0xff in the IPv4-mapped prefix and 0 in the NAT64 one.
        constexpr std::size_t kMappedMarkerIndex = detail::ip::kEmbeddedV4Offset - 2;
        IpAddress network = *address;
        if (!network.isV4() && prefix >= detail::ip::kEmbeddedV4PrefixLength &&
            network.canonical().isV4() &&
            network.bytes()[kMappedMarkerIndex] == detail::ip::kByteMask) {
            network = network.canonical();
            prefix -= detail::ip::kEmbeddedV4PrefixLength;
        }
        return Cidr{network, prefix};
    }

    constexpr Cidr(IpAddress network, int prefix) noexcept
        : network_(network.masked(prefix)), prefix_(prefix) {}

    /// True when `address`, reduced by `IpAddress::canonical()`, lies in this network.
    [[nodiscard]] constexpr bool contains(const IpAddress& address) const noexcept {
        const IpAddress a = address.canonical();
        return a.family() == network_.family() && a.masked(prefix_) == network_;
    }

    [[nodiscard]] constexpr const IpAddress& network() const noexcept { return network_; }
    [[nodiscard]] constexpr int prefix() const noexcept { return prefix_; }
    [[nodiscard]] std::string toString() const {
        return network_.toString() + "/" + std::to_string(prefix_);
    }

    friend constexpr bool operator==(const Cidr&, const Cidr&) noexcept = default;

private:
    IpAddress network_;
    int prefix_;
};

/// A set of networks, IPv4 and IPv6 mixed: allow lists (callers that bypass limits, health
/// checkers) and trusted proxies. Lookups reduce IPv4-mapped and NAT64 addresses to IPv4 first,
/// so write IPv4 ranges as IPv4.
///
/// Thread safety: thread-compatible; `contains` is const and may be called concurrently.
/// Complexity: `contains` is linear in the number of networks (meant for tens of entries).
class CidrSet {
public:
    CidrSet() = default;

    /// Parses each entry with `Cidr::parse`.
    /// Throws: `std::invalid_argument` naming `field` and the first entry that is not a network.
    explicit CidrSet(const std::vector<std::string>& entries, std::string_view field = "CidrSet") {
        for (const std::string& e : entries) {
            add(e, field);
        }
    }
    CidrSet(std::initializer_list<std::string_view> entries) {
        for (const std::string_view e : entries) {
            add(e, "CidrSet");
        }
    }

    /// Adds one network. Throws: `std::invalid_argument` naming `field` and `entry`.
    void add(std::string_view entry, std::string_view field = "CidrSet") {
        const std::optional<Cidr> cidr = Cidr::parse(entry);
        if (!cidr) {
            detail::throwInvalidArgument(std::string(field).append(": '").append(entry).append(
                "' is not an IPv4 or IPv6 address or network (a.b.c.d/n, x:y::/n, "
                "host bits zero)"));
        }
        networks_.push_back(*cidr);
    }

    [[nodiscard]] bool contains(const IpAddress& address) const noexcept {
        return std::any_of(networks_.begin(), networks_.end(),
                           [&address](const Cidr& c) { return c.contains(address); });
    }

    /// False for text that is not an address (never throws).
    [[nodiscard]] bool contains(std::string_view address) const noexcept {
        const std::optional<IpAddress> a = IpAddress::parse(address);
        return a && contains(*a);
    }

    [[nodiscard]] bool empty() const noexcept { return networks_.empty(); }
    [[nodiscard]] const std::vector<Cidr>& networks() const noexcept { return networks_; }

private:
    std::vector<Cidr> networks_;
};

}  // namespace http
}  // namespace v1
}  // namespace ratelimit
