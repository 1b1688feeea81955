// Package shallow runs a deep call (a store read: database/sql and the
// SQLite driver) on a goroutine of its own, so that the goroutine of a
// call about to park never grows its stack for it. It imports nothing of
// jobwatch.
//
// Why: a goroutine's stack doubles when a call goes deeper than it
// (2, 4, 8, 16 KiB) and the garbage collector halves it again only while
// less than a quarter of it is in use. A parked WaitJob's handler
// goroutine sits about 7 KiB deep (net/http's HTTP/2 server, connect-go,
// jobwatch's middleware, the engine's select): it fits 8 KiB, but a store
// read made from that depth goes past 8 KiB, the stack becomes 16 KiB, and
// at 7 KiB in use it never shrinks back. That was 8 KiB of every parked
// call's 28 KiB of server RSS. The helper goroutine's stack is freed as it
// returns; what it costs is one goroutine start per read (microseconds),
// made once before the call parks.
package shallow

// Call returns f's results, computed on a new goroutine. A panic in f is
// raised again in the caller, where its recover (connect's, a test's) can
// see it.
func Call[T any](f func() (T, error)) (T, error) {
	type result struct {
		v        T
		err      error
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panicked = p
			}
			done <- r
		}()
		r.v, r.err = f()
	}()
	r := <-done
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.v, r.err
}

// Do is Call for a function with no result but its error.
func Do(f func() error) error {
	_, err := Call(func() (struct{}, error) { return struct{}{}, f() })
	return err
}
