// Guava's RateLimiter, one per key in a ConcurrentHashMap: an in-memory peer of
// bench/run.sh --peers. Built from Debian's libguava-java:
//
//   javac -cp /usr/share/java/guava.jar -d <dir> GuavaPeer.java
//   java -cp /usr/share/java/guava.jar:<dir> GuavaPeer [seconds per case]
//
// Prints one line per case, tab-separated: peer, case, value, unit. The limit (10^12 permits
// per second, so a burst of 10^12: Guava's SmoothBursty stores one second of permits) admits
// every call of a run, as the library's "denied:0" rows; keys are the library's 15-byte
// "user:%010d"; every key exists before timing. Each case is run once untimed first (JIT).
// keys_100k_shuffled names the keys after a fixed shuffle of their numbers, created (so
// allocated) and visited in that order, in the way the library's --key_order=shuffled does:
// String.hashCode of consecutive names differs by little, so keys_100k's lookups fall mostly in
// the same cache lines of the map's table.

import com.google.common.util.concurrent.RateLimiter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

public final class GuavaPeer {
    private static final String PEER = "guava-RateLimiter";
    private static final double RATE = 1e12;

    private final ConcurrentHashMap<String, RateLimiter> map = new ConcurrentHashMap<>();

    boolean allow(String key) {
        RateLimiter limiter = map.get(key);
        if (limiter == null) {
            limiter = map.computeIfAbsent(key, k -> RateLimiter.create(RATE));
        }
        return limiter.tryAcquire();
    }

    static String[] keySet(int n) {
        String[] keys = new String[n];
        for (int i = 0; i < n; ++i) {
            keys[i] = String.format("user:%010d", i);
        }
        return keys;
    }

    /** keySet's names in a fixed pseudo-random order. */
    static String[] shuffledKeySet(int n) {
        List<Integer> numbers = new ArrayList<>(n);
        for (int i = 0; i < n; ++i) {
            numbers.add(i);
        }
        Collections.shuffle(numbers, new Random(20261207));
        String[] keys = new String[n];
        for (int i = 0; i < n; ++i) {
            keys[i] = String.format("user:%010d", numbers.get(i));
        }
        return keys;
    }

    /** Wall nanoseconds per check, all threads together. */
    static double run(GuavaPeer peer, String[] keys, int threads, double seconds)
            throws InterruptedException {
        AtomicLong total = new AtomicLong();
        AtomicLong refused = new AtomicLong();
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        Thread[] workers = new Thread[threads];
        long start = System.nanoTime();
        for (int t = 0; t < threads; ++t) {
            final int offset = (int) ((long) t * keys.length / threads);
            workers[t] = new Thread(() -> {
                int i = offset;
                long n = 0;
                long no = 0;
                do {
                    for (int j = 0; j < 1024; ++j) {
                        if (!peer.allow(keys[i])) {
                            ++no;
                        }
                        if (++i == keys.length) {
                            i = 0;
                        }
                    }
                    n += 1024;
                } while (System.nanoTime() < deadline);
                total.addAndGet(n);
                refused.addAndGet(no);
            });
            workers[t].start();
        }
        for (Thread w : workers) {
            w.join();
        }
        long elapsed = System.nanoTime() - start;
        if (refused.get() != 0) {
            throw new IllegalStateException(refused.get() + " of " + total.get() + " refused");
        }
        return (double) elapsed / total.get();
    }

    static long heapBytes() throws InterruptedException {
        Runtime rt = Runtime.getRuntime();
        for (int i = 0; i < 3; ++i) {
            System.gc();
            Thread.sleep(50);
        }
        return rt.totalMemory() - rt.freeMemory();
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 0.5;
        String[] one = keySet(1);
        GuavaPeer hot = new GuavaPeer();
        run(hot, one, 1, seconds);  // warm-up (JIT)
        System.out.printf("%s\thot_1t\t%.2f\tns%n", PEER, run(hot, one, 1, seconds));
        run(hot, one, 2, seconds / 2);
        System.out.printf("%s\thot_2t\t%.2f\tns%n", PEER, run(hot, one, 2, seconds));

        String[] keys = keySet(100_000);
        GuavaPeer many = new GuavaPeer();
        for (String key : keys) {
            many.allow(key);
        }
        run(many, keys, 1, seconds / 2);
        System.out.printf("%s\tkeys_100k\t%.2f\tns%n", PEER, run(many, keys, 1, seconds));
        many = null;

        keys = shuffledKeySet(100_000);
        many = new GuavaPeer();
        for (String key : keys) {
            many.allow(key);
        }
        run(many, keys, 1, seconds / 2);
        System.out.printf(
                "%s\tkeys_100k_shuffled\t%.2f\tns%n", PEER, run(many, keys, 1, seconds));
        many = null;
        keys = null;

        // Bytes per idle key: live heap after 10^6 keys minus before, over 10^6 (the key
        // strings, held only by the map, included).
        final int n = 1_000_000;
        long before = heapBytes();
        GuavaPeer idle = new GuavaPeer();
        for (int i = 0; i < n; ++i) {
            idle.allow(String.format("user:%010d", i));
        }
        long after = heapBytes();
        System.out.printf("%s\tidle_bytes_1m\t%.1f\tbytes%n", PEER, (double) (after - before) / n);
        if (idle.map.size() != n) {
            throw new IllegalStateException("lost keys");
        }
    }
}
