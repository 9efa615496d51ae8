#pragma once

// Everything in <ratelimit/ratelimit.hpp> plus the Redis storage; needs hiredis.

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis_options.hpp>
#include <ratelimit/storage/redis.hpp>
