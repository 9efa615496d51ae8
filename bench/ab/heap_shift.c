/* A preload shim for timing runs (bench/ab/run.sh): before main, it allocates HEAP_SHIFT bytes
 * and keeps them, so every later block of the main heap (glibc: below the mmap threshold,
 * 128 KiB) sits at another offset within its page. Address-space randomization moves the heap by
 * whole pages only, so without it each build keeps one layout from run to run, and a comparison
 * of two builds measures their layouts as well as their code. Linux and glibc, as taskset. */
#include <stdlib.h>

/* volatile: a block that is never read would be left unallocated by the compiler. */
static void* volatile kept;

__attribute__((constructor)) static void shiftHeap(void) {
    const char* bytes = getenv("HEAP_SHIFT");
    if (bytes != NULL) {
        kept = malloc((size_t)strtoul(bytes, NULL, 10));
    }
}
