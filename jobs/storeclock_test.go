package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// skewedStore is a database whose clock is skew ahead of this machine's,
// answering after delay.
type skewedStore struct {
	store.Store
	skew, delay time.Duration
}

func (s skewedStore) Now(context.Context) (time.Time, error) {
	time.Sleep(s.delay)
	return time.Now().Add(s.skew).UTC(), nil
}

func TestTheEngineClockFollowsTheDatabasesOnlyBeyondWhatARoundTripCanMeasure(t *testing.T) {
	for _, tc := range []struct {
		name        string
		skew, delay time.Duration
		want        time.Duration // the offset, within tolerance
		tolerance   time.Duration
	}{
		{"a database five seconds ahead", 5 * time.Second, 0, 5 * time.Second, 100 * time.Millisecond},
		{"a database a minute behind", -time.Minute, 0, -time.Minute, 100 * time.Millisecond},
		// Answered 20 ms late, a reading of an agreeing clock seems 10 ms
		// off; that is within the round trip, so no offset at all.
		{"an agreeing database answering slowly", 0, 20 * time.Millisecond, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &storeClock{st: skewedStore{skew: tc.skew, delay: tc.delay}}
			if err := c.sync(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := time.Duration(c.offset.Load())
			if d := got - tc.want; d.Abs() > tc.tolerance {
				t.Errorf("offset %v, want %v (±%v)", got, tc.want, tc.tolerance)
			}
		})
	}
}
