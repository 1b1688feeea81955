package jobs

import (
	"testing"
	"time"
)

func TestDeadlines(t *testing.T) {
	t.Run("a cap fires at its deadline, never before it", func(t *testing.T) {
		d := newDeadlines()
		for _, wait := range []time.Duration{0, time.Millisecond, 30 * time.Millisecond, 200 * time.Millisecond} {
			deadline := time.Now().Add(wait)
			c, stop := d.until(deadline)
			select {
			case <-c:
			case <-time.After(wait + 10*time.Second): // fails only a broken build
				t.Fatalf("a cap of %v did not fire", wait)
			}
			if early := time.Until(deadline); early > 0 {
				t.Errorf("a cap of %v fired %v before its deadline", wait, early)
			}
			stop()
		}
	})
	t.Run("the zero deadline never fires", func(t *testing.T) {
		c, stop := newDeadlines().until(time.Time{})
		defer stop()
		if c != nil {
			t.Fatal("the zero deadline has a channel")
		}
	})
	t.Run("calls parked together share a few timers, and leaving frees them", func(t *testing.T) {
		d := newDeadlines()
		var stops []func()
		start := time.Now()
		for range 10_000 {
			_, stop := d.until(time.Now().Add(time.Minute))
			stops = append(stops, stop)
		}
		// A minute's cap is rounded up to 16ms: the calls of a burst
		// share one slot per 16ms it lasts.
		want := int(time.Since(start)/maxDeadlineSlack) + 2
		if n := d.armed(); n > want {
			t.Errorf("10,000 calls parked within %v hold %d timers, want at most %d", time.Since(start), n, want)
		}
		for _, stop := range stops {
			stop()
		}
		if n := d.armed(); n != 0 {
			t.Errorf("after every call left, %d timers are still armed", n)
		}
	})
	t.Run("a call of a slot that fired gets a new one", func(t *testing.T) {
		d := newDeadlines()
		deadline := time.Now().Add(5 * time.Millisecond)
		first, stopFirst := d.until(deadline)
		<-first
		second, stopSecond := d.until(time.Now().Add(time.Hour))
		defer stopSecond()
		select {
		case <-second:
			t.Fatal("a cap an hour away fired with an earlier slot")
		default:
		}
		stopFirst() // after its slot fired: changes nothing
		if n := d.armed(); n != 1 {
			t.Errorf("%d slots armed, want the hour's", n)
		}
	})
}
