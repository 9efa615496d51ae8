#pragma once

// Small pieces every fuzz target shares: a byte reader over the fuzzer's input and a failure
// report that aborts (libFuzzer then saves the input as a crash artifact).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rlfuzz {

__extension__ using Int128 = __int128;

/// Reads the fuzzer's input front to back; past its end every read yields zero bytes.
class ByteReader {
public:
    ByteReader(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}

    [[nodiscard]] bool empty() const noexcept { return pos_ >= size_; }
    [[nodiscard]] std::size_t left() const noexcept { return pos_ < size_ ? size_ - pos_ : 0; }

    std::uint8_t byte() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }

    std::uint64_t u64() noexcept {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) {
            v = (v << 8U) | byte();
        }
        return v;
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

/// Decimal text of a 128-bit value (for failure reports).
inline std::string toString(Int128 v) {
    if (v == 0) {
        return "0";
    }
    const bool negative = v < 0;
    std::string out;
    while (v != 0) {
        const int digit = static_cast<int>(v % 10);
        out.insert(out.begin(), static_cast<char>('0' + (digit < 0 ? -digit : digit)));
        v /= 10;
    }
    return negative ? "-" + out : out;
}

/// Prints what was violated and aborts, so the fuzzer records the input.
[[noreturn]] inline void fail(const std::string& what) {
    // Nothing is left to do when stderr fails: the abort still makes libFuzzer keep the input.
    (void)std::fprintf(stderr, "\nratelimit fuzz: VIOLATED: %s\n", what.c_str());
    (void)std::fflush(stderr);
    std::abort();
}

}  // namespace rlfuzz
