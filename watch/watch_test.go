package watch

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestPublishWithoutSubscribersIsDropped(t *testing.T) {
	h := NewHub[string]()
	if h.Publish("a", 1, "x") {
		t.Fatal("publish with no subscriber was kept")
	}
	if h.Len() != 0 {
		t.Fatalf("hub holds %d cells with no subscriber", h.Len())
	}
}

func TestSubscriberSeesEveryPublishAfterSubscribe(t *testing.T) {
	h := NewHub[string]()
	sub := h.Subscribe("a")
	defer sub.Close()
	_, v0, changed := sub.Latest()
	if v0 != 0 {
		t.Fatalf("fresh cell has version %d, want 0", v0)
	}
	h.Publish("a", 3, "three")
	select {
	case <-changed:
	default:
		t.Fatal("publish after subscribe did not close the changed channel")
	}
	v, ver, _ := sub.Latest()
	if v != "three" || ver != 3 {
		t.Fatalf("latest = %q v%d, want three v3", v, ver)
	}
}

func TestVersionsOnlyGoUp(t *testing.T) {
	tests := []struct {
		name    string
		publish []int64
		want    int64
	}{
		{"a lower version after a higher one is dropped", []int64{5, 3}, 5},
		{"a duplicate version is dropped", []int64{2, 2}, 2},
		{"increasing versions are all kept", []int64{1, 2, 7}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHub[int64]()
			sub := h.Subscribe("k")
			defer sub.Close()
			for _, v := range tt.publish {
				h.Publish("k", v, v)
			}
			got, ver, _ := sub.Latest()
			if ver != tt.want || got != tt.want {
				t.Fatalf("latest = %d v%d, want v%d", got, ver, tt.want)
			}
		})
	}
}

func TestLastCloseFreesTheCell(t *testing.T) {
	h := NewHub[int]()
	a, b := h.Subscribe("k"), h.Subscribe("k")
	h.Publish("k", 1, 1)
	a.Close()
	a.Close() // idempotent: must not free b's cell
	if v, ver, _ := b.Latest(); v != 1 || ver != 1 {
		t.Fatalf("open subscription lost the value: %d v%d", v, ver)
	}
	if h.Len() != 1 {
		t.Fatalf("cells = %d, want 1 while b is open", h.Len())
	}
	b.Close()
	if h.Len() != 0 {
		t.Fatalf("cells = %d after the last close, want 0", h.Len())
	}
	c := h.Subscribe("k")
	defer c.Close()
	if _, ver, _ := c.Latest(); ver != 0 {
		t.Fatalf("a new cell after free starts at v%d, want 0", ver)
	}
}

// TestManyReadersNeverMissTheLastVersion runs thousands of readers against
// one fast publisher: each reader must end having seen the final version,
// however many intermediate ones it skipped, and the hub must end empty.
func TestManyReadersNeverMissTheLastVersion(t *testing.T) {
	const readers, last = 2000, 500
	h := NewHub[int64]()
	var subscribed, done sync.WaitGroup
	subscribed.Add(readers)
	done.Add(readers)
	errs := make(chan string, readers)
	for i := 0; i < readers; i++ {
		go func() {
			defer done.Done()
			sub := h.Subscribe("job")
			defer sub.Close()
			subscribed.Done()
			var seen int64
			timeout := time.After(30 * time.Second)
			for {
				v, ver, changed := sub.Latest()
				if ver < seen {
					errs <- "version went backwards"
					return
				}
				if v != ver {
					errs <- "value does not belong to its version"
					return
				}
				seen = ver
				if seen == last {
					return
				}
				select {
				case <-changed:
				case <-timeout:
					errs <- "reader never saw the last version"
					return
				}
			}
		}()
	}
	subscribed.Wait()
	for v := int64(1); v <= last; v++ {
		h.Publish("job", v, v)
	}
	done.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if h.Len() != 0 {
		t.Fatalf("cells = %d after every reader closed", h.Len())
	}
}

// TestSubscribeThenReadCannotMiss models the pattern WaitJob relies on: a
// writer commits then publishes; a reader subscribes then reads the
// committed value. Whatever the interleaving, the reader either read the
// final value or is woken with it.
func TestSubscribeThenReadCannotMiss(t *testing.T) {
	for i := 0; i < 2000; i++ {
		h := NewHub[int64]()
		var mu sync.Mutex
		var committed int64
		go func() {
			mu.Lock()
			committed = 1
			mu.Unlock()
			h.Publish("job", 1, 1)
		}()
		sub := h.Subscribe("job")
		mu.Lock()
		read := committed
		mu.Unlock()
		if read == 0 {
			_, _, changed := sub.Latest()
			_, ver, _ := sub.Latest()
			if ver == 0 {
				select {
				case <-changed:
				case <-time.After(10 * time.Second):
					t.Fatal("a publish after subscribe never woke the reader")
				}
			}
		}
		sub.Close()
	}
}

func BenchmarkPublishToParkedReaders(b *testing.B) {
	h := NewHub[int64]()
	const readers = 10000
	subs := make([]*Subscription[int64], readers)
	for i := range subs {
		subs[i] = h.Subscribe("job")
	}
	defer func() {
		for _, s := range subs {
			s.Close()
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.Publish("job", int64(i+1), int64(i))
	}
}

func TestVersionAndKeysShowOnlySubscribedKeys(t *testing.T) {
	h := NewHub[string]()
	if _, ok := h.Version("a"); ok {
		t.Fatal("a key nobody subscribed to reports a subscriber")
	}
	sub := h.Subscribe("a")
	other := h.Subscribe("b")
	if v, ok := h.Version("a"); !ok || v != 0 {
		t.Errorf("Version(a) = %d, %v before any publish, want 0, true", v, ok)
	}
	h.Publish("a", 7, "seven")
	if v, ok := h.Version("a"); !ok || v != 7 {
		t.Errorf("Version(a) = %d, %v, want 7, true", v, ok)
	}
	keys := h.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("Keys() = %v, want [a b]", keys)
	}
	sub.Close()
	other.Close()
	if _, ok := h.Version("a"); ok || len(h.Keys()) != 0 {
		t.Errorf("after the last Close: Version(a) subscribed, or Keys() = %v", h.Keys())
	}
}
