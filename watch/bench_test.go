package watch

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkPublishWakeN publishes to a key with N parked readers and
// waits until every reader has woken and read the new value with Latest:
// one op is one publish fanned out to N readers. It is the hub's share of
// waking 10,000 WaitJob calls of one job.
//
//	go test ./watch/ -run '^$' -bench BenchmarkPublishWakeN -count 10 | benchstat -
func BenchmarkPublishWakeN(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			h := NewHub[int64]()
			var woke sync.WaitGroup
			quit := make(chan struct{})
			var stopped sync.WaitGroup
			stopped.Add(n)
			var subscribed sync.WaitGroup
			subscribed.Add(n)
			for range n {
				go func() {
					defer stopped.Done()
					sub := h.Subscribe("job")
					defer sub.Close()
					_, _, changed := sub.Latest()
					subscribed.Done()
					for {
						select {
						case <-changed:
						case <-quit:
							return
						}
						v, seen, next := sub.Latest()
						changed = next
						if v != seen {
							panic("value does not belong to its version")
						}
						woke.Done()
					}
				}()
			}
			subscribed.Wait()
			b.ResetTimer()
			for i := range b.N {
				woke.Add(n)
				h.Publish("job", int64(i+1), int64(i+1))
				woke.Wait()
			}
			b.StopTimer()
			close(quit)
			stopped.Wait()
		})
	}
}

// BenchmarkSubscribeClose opens, reads and closes subscriptions from every
// P at once: on one key (every caller parks on the same job) and on many
// (callers of different jobs).
//
//	go test ./watch/ -run '^$' -bench BenchmarkSubscribeClose -cpu 1,2 -count 10 | benchstat -
func BenchmarkSubscribeClose(b *testing.B) {
	b.Run("one-key", func(b *testing.B) {
		h := NewHub[int64]()
		keep := h.Subscribe("job") // the cell stays, as it does while others wait
		defer keep.Close()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				sub := h.Subscribe("job")
				sub.Latest()
				sub.Close()
			}
		})
	})
	b.Run("many-keys", func(b *testing.B) {
		h := NewHub[int64]()
		keys := make([]string, 1024)
		for i := range keys {
			keys[i] = fmt.Sprintf("job-%d", i)
		}
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			for pb.Next() {
				i++
				sub := h.Subscribe(keys[i%len(keys)])
				sub.Latest()
				sub.Close()
			}
		})
	})
}
