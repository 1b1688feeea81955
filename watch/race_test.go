package watch

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSubscribeRacingTheLastClose opens a subscription while the last
// one of the same key closes, again and again: whichever wins, the new
// subscription must see a publish made after it opened, and the hub must
// end empty.
func TestSubscribeRacingTheLastClose(t *testing.T) {
	h := NewHub[int64]()
	for i := range 5000 {
		old := h.Subscribe("k")
		h.Publish("k", 1, 1)
		closed := make(chan struct{})
		go func() {
			old.Close()
			close(closed)
		}()
		sub := h.Subscribe("k")
		_, before, changed := sub.Latest()
		if before != 0 && before != 1 {
			t.Fatalf("round %d: a new subscription reads v%d, want v0 (fresh cell) or v1 (kept cell)", i, before)
		}
		<-closed
		if !h.Publish("k", 2, 2) {
			t.Fatalf("round %d: a publish with an open subscription was dropped", i)
		}
		select {
		case <-changed:
		default:
			t.Fatalf("round %d: a publish after subscribe did not wake the subscription", i)
		}
		if v, ver, _ := sub.Latest(); v != 2 || ver != 2 {
			t.Fatalf("round %d: latest = %d v%d, want 2 v2", i, v, ver)
		}
		sub.Close()
		if n := h.Len(); n != 0 {
			t.Fatalf("round %d: cells = %d after every subscription closed", i, n)
		}
	}
}

// TestPublishRacingSubscribe runs the WaitJob pattern with cells freed and
// created all the time: a writer commits versions 1..last and publishes
// each after its commit, while readers keep subscribing, reading the
// committed version, waiting for the last one through the hub, and
// closing. No reader may miss the last version, whatever it raced.
func TestPublishRacingSubscribe(t *testing.T) {
	const readers, rounds, last = 16, 300, 2000
	h := NewHub[int64]()
	var committed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				sub := h.Subscribe("job")
				read := committed.Load()
				deadline := time.After(10 * time.Second)
				for read < last {
					v, ver, changed := sub.Latest()
					if ver > 0 && v != ver {
						errs <- "value does not belong to its version"
						sub.Close()
						return
					}
					if ver >= last {
						break
					}
					select {
					case <-changed:
					case <-deadline:
						errs <- "a reader never saw the last version"
						sub.Close()
						return
					}
				}
				sub.Close()
			}
		}()
	}
	for v := int64(1); v <= last; v++ {
		committed.Store(v)
		h.Publish("job", v, v)
		if v%100 == 0 {
			time.Sleep(time.Millisecond) // let readers come and go mid-stream
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if n := h.Len(); n != 0 {
		t.Fatalf("cells = %d after every reader closed", n)
	}
}

// TestConcurrentPublishersKeepTheHighestVersion publishes versions in
// random order from several goroutines while readers watch: each reader
// sees versions only go up, and the cell ends at the highest.
func TestConcurrentPublishersKeepTheHighestVersion(t *testing.T) {
	const publishers, perPublisher = 8, 500
	h := NewHub[int64]()
	keep := h.Subscribe("k")
	defer keep.Close()
	stop := make(chan struct{})
	var readers sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			sub := h.Subscribe("k")
			defer sub.Close()
			var seen int64
			for {
				v, ver, changed := sub.Latest()
				if ver < seen || (ver > 0 && v != ver) {
					errs <- "a reader saw a version go down or a value of another version"
					return
				}
				seen = ver
				select {
				case <-changed:
				case <-stop:
					return
				}
			}
		}()
	}
	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			versions := make([]int64, perPublisher)
			for i := range versions {
				versions[i] = int64(i*publishers + p + 1)
			}
			rand.Shuffle(len(versions), func(i, j int) { versions[i], versions[j] = versions[j], versions[i] })
			for _, v := range versions {
				h.Publish("k", v, v)
			}
		}()
	}
	pubs.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if v, ver, _ := keep.Latest(); ver != publishers*perPublisher || v != ver {
		t.Fatalf("latest = %d v%d, want v%d", v, ver, publishers*perPublisher)
	}
}

// TestSubscribersChurningOnOneKeySeeTheirOwnPublish has goroutines open a
// subscription, publish a new version, check that they see it (or a
// later one) and close, all on one key, so that cells are freed and
// created under every interleaving of Subscribe, Publish and the last
// Close. A subscription counted into a cell that a racing Close frees
// would miss its own publish.
func TestSubscribersChurningOnOneKeySeeTheirOwnPublish(t *testing.T) {
	const goroutines, rounds = 8, 20000
	h := NewHub[int64]()
	var version atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				sub := h.Subscribe("k")
				v := version.Add(1)
				h.Publish("k", v, v)
				if _, ver, _ := sub.Latest(); ver < v {
					errs <- "a subscription missed a publish made after it opened"
					sub.Close()
					return
				}
				sub.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if n := h.Len(); n != 0 {
		t.Fatalf("cells = %d after every subscription closed", n)
	}
}
