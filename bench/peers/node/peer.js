// rate-limiter-flexible (RateLimiterRedis) over ioredis: the Redis rows of bench/run.sh --peers.
//
//   node peer.js <redis unix socket> [seconds per case]
//
// Prints one line per case, tab-separated: peer, case, value, unit. Each case calls
// consume(key) on one hot key with a limit that admits every call of the run, with 1, 8 and
// 50 calls in flight (async loops on one ioredis connection, which pipelines them), and
// reports wall time per check.
'use strict';

const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const PEER = 'rate-limiter-flexible+ioredis';

async function runCase(limiter, inFlight, seconds) {
  let done = 0;
  let refused = 0;
  const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
  const start = process.hrtime.bigint();
  async function loop() {
    while (process.hrtime.bigint() < end) {
      try {
        await limiter.consume('user:0000000000', 1);
      } catch (e) {
        if (e instanceof Error) throw e;
        refused += 1;  // a RateLimiterRes: refused
      }
      done += 1;
    }
  }
  await Promise.all(Array.from({ length: inFlight }, loop));
  const ns = Number(process.hrtime.bigint() - start);
  if (refused !== 0) throw new Error(`${refused} of ${done} calls refused`);
  return ns / done / 1000;  // µs per check
}

async function main() {
  const socket = process.argv[2];
  const seconds = Number(process.argv[3] || '1');
  const redis = new Redis({ path: socket, enableOfflineQueue: true });
  const limiter = new RateLimiterRedis({
    storeClient: redis,
    keyPrefix: 'rlflx',
    points: 1e12,  // never runs out within a run, as the library's rows
    duration: 1,
  });
  await runCase(limiter, 8, Math.min(0.3, seconds));  // warm-up: JIT, script load
  for (const [name, inFlight] of [['redis_seq', 1], ['redis_8', 8], ['redis_50', 50]]) {
    const us = await runCase(limiter, inFlight, seconds);
    process.stdout.write(`${PEER}\t${name}\t${us.toFixed(3)}\tus\n`);
  }
  redis.disconnect();
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
