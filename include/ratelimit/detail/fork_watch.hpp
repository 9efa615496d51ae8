#pragma once

#include <cstddef>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Tells whether the calling process is not the one that made this object (a child forked
/// since), without a lock and without a system call per look: one page of its own, mapped with
/// `MADV_WIPEONFORK`, reads as zero in a child. Where the kernel lacks it (before Linux 4.14)
/// each look compares `getpid()` instead. No process-wide state: the page belongs to this object
/// alone.
/// Thread safety: thread-safe; `forked()` only reads what the constructor wrote.
class ForkWatch {
public:
    ForkWatch() noexcept {
#ifdef MADV_WIPEONFORK
        const long pageSize = ::sysconf(_SC_PAGESIZE);
        size_ = pageSize > 0 ? static_cast<std::size_t>(pageSize) : 4096;
        void* page =
            ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page != MAP_FAILED) {
            if (::madvise(page, size_, MADV_WIPEONFORK) == 0) {
                page_ = page;
                mark_ = static_cast<volatile unsigned char*>(page);
                *mark_ = 1;
            } else {
                ::munmap(page, size_);
            }
        }
#endif
    }
    ForkWatch(const ForkWatch&) = delete;
    ForkWatch& operator=(const ForkWatch&) = delete;
    ForkWatch(ForkWatch&&) = delete;
    ForkWatch& operator=(ForkWatch&&) = delete;
    ~ForkWatch() {
        if (page_ != nullptr) {
            ::munmap(page_, size_);
        }
    }

    /// True in a process forked (directly or not) from the one that made this object.
    [[nodiscard]] bool forked() const noexcept {
        return mark_ != nullptr ? *mark_ == 0 : ::getpid() != pid_;
    }

private:
    void* page_ = nullptr;
    volatile unsigned char* mark_ = nullptr;  // the page's first byte: 0 in a forked child
    std::size_t size_ = 0;
    pid_t pid_ = ::getpid();
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
