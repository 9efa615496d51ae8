// Go's golang.org/x/time/rate, one *rate.Limiter per key in a sync.Map: an in-memory peer of
// bench/run.sh --peers. Built offline from Debian's golang-golang-x-time-dev:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o peer-go .
//	./peer-go [seconds per case]
//
// Prints one line per case, tab-separated: peer, case, value, unit. The limit (10^6/s, burst
// 10^12) admits every call of a run, as the library's "denied:0" rows; keys are the library's
// 15-byte "user:%010d"; every key exists before timing. keys_100k_shuffled names the keys
// after a fixed shuffle of their numbers, created and visited in that order, in the way the
// library's --key_order=shuffled does.
package main

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

const peer = "go-x/time/rate"

type keyed struct{ m sync.Map }

func (k *keyed) allow(key string) bool {
	v, ok := k.m.Load(key)
	if !ok {
		v, _ = k.m.LoadOrStore(key, rate.NewLimiter(rate.Limit(1e6), 1_000_000_000_000))
	}
	return v.(*rate.Limiter).Allow()
}

func keySet(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%010d", i)
	}
	return keys
}

// shuffledKeySet is keySet's names in a fixed pseudo-random order.
func shuffledKeySet(n int) []string {
	keys := make([]string, n)
	for i, number := range rand.New(rand.NewSource(20261207)).Perm(n) {
		keys[i] = fmt.Sprintf("user:%010d", number)
	}
	return keys
}

// run calls allow from `threads` goroutines for about `seconds`, each going round-robin over
// keys from its own offset, and returns wall nanoseconds per check (all goroutines together).
func run(k *keyed, keys []string, threads int, seconds float64) float64 {
	var total, refused int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	start := time.Now()
	for t := 0; t < threads; t++ {
		wg.Add(1)
		go func(offset int) {
			defer wg.Done()
			i := offset % len(keys)
			var n, no int64
			for {
				for j := 0; j < 1024; j++ {
					if !k.allow(keys[i]) {
						no++
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				n += 1024
				if time.Now().After(deadline) {
					break
				}
			}
			atomic.AddInt64(&total, n)
			atomic.AddInt64(&refused, no)
		}(t * len(keys) / threads)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if refused != 0 {
		fmt.Fprintf(os.Stderr, "%s: %d of %d calls refused\n", peer, refused, total)
		os.Exit(1)
	}
	return float64(elapsed.Nanoseconds()) / float64(total)
}

func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return s.HeapAlloc
}

func main() {
	seconds := 0.5
	if len(os.Args) > 1 {
		if v, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			seconds = v
		}
	}
	hot := &keyed{}
	one := keySet(1)
	hot.allow(one[0])
	run(hot, one, 1, seconds/4) // warm-up
	fmt.Printf("%s\thot_1t\t%.2f\tns\n", peer, run(hot, one, 1, seconds))
	fmt.Printf("%s\thot_2t\t%.2f\tns\n", peer, run(hot, one, 2, seconds))

	keys := keySet(100_000)
	many := &keyed{}
	for _, key := range keys {
		many.allow(key)
	}
	fmt.Printf("%s\tkeys_100k\t%.2f\tns\n", peer, run(many, keys, 1, seconds))
	many, keys = nil, nil

	keys = shuffledKeySet(100_000)
	many = &keyed{}
	for _, key := range keys {
		many.allow(key)
	}
	fmt.Printf("%s\tkeys_100k_shuffled\t%.2f\tns\n", peer, run(many, keys, 1, seconds))
	many, keys = nil, nil

	// Bytes per idle key: live heap after 10^6 keys minus before, over 10^6. The keys are
	// built on the fly, so the map holds the only reference to each key string, as a service's
	// map would (the strings' 16 bytes each are counted, as the library counts its inline keys).
	const n = 1_000_000
	idle := &keyed{}
	before := heapBytes()
	for i := 0; i < n; i++ {
		idle.allow(fmt.Sprintf("user:%010d", i))
	}
	after := heapBytes()
	fmt.Printf("%s\tidle_bytes_1m\t%.1f\tbytes\n", peer, float64(after-before)/n)
	runtime.KeepAlive(idle)
}
