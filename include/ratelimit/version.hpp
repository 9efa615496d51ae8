#pragma once

/// @file
/// The library version. CMake parses the three numbers below (one source of truth), so keep
/// each `#define` on one line in this form.

#define RATELIMIT_VERSION_MAJOR 0
#define RATELIMIT_VERSION_MINOR 1
#define RATELIMIT_VERSION_PATCH 0

/// The version as one number, `major * 10000 + minor * 100 + patch` (0.1.0 is 100), for
/// `#if RATELIMIT_VERSION >= ...` checks.
#define RATELIMIT_VERSION \
    (RATELIMIT_VERSION_MAJOR * 10000 + RATELIMIT_VERSION_MINOR * 100 + RATELIMIT_VERSION_PATCH)
