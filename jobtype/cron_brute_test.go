package jobtype

import (
	"slices"
	"testing"
	"time"
)

// Next agrees, across the days the clocks change, with the times read
// the slow way: every wall-clock minute of the days around the change
// that the expression names, each at its first occurrence (a skipped one
// at the offset before the change), one run per instant, in order.
func TestCronNextAgreesWithEveryMinuteOfTheDaysTheClocksChange(t *testing.T) {
	days := []struct {
		zone string
		day  time.Time // a day the clocks change, as a wall-clock date
	}{
		{"Europe/Berlin", time.Date(2027, 3, 28, 0, 0, 0, 0, time.UTC)},
		{"Europe/Berlin", time.Date(2027, 10, 31, 0, 0, 0, 0, time.UTC)},
		{"America/New_York", time.Date(2027, 3, 14, 0, 0, 0, 0, time.UTC)},
		{"America/New_York", time.Date(2027, 11, 7, 0, 0, 0, 0, time.UTC)},
		{"Australia/Lord_Howe", time.Date(2026, 10, 4, 0, 0, 0, 0, time.UTC)},
		{"Australia/Lord_Howe", time.Date(2027, 4, 4, 0, 0, 0, 0, time.UTC)},
	}
	exprs := []string{"*/10 2 * * *", "5,50 2-3 * * *", "20,40 2 * * *", "*/15 * * * *", "30 2 * * *", "0 * * * *", "7,37 1-3 * * *"}
	for _, d := range days {
		for _, expr := range exprs {
			c, err := ParseCron(expr, d.zone)
			if err != nil {
				t.Fatal(err)
			}
			// The slow way, over the day before, the day and the day after.
			var want []time.Time
			for w := d.day.Add(-24 * time.Hour); w.Before(d.day.Add(48 * time.Hour)); w = w.Add(time.Minute) {
				if c.spec.Next(w.Add(-time.Second)).Equal(w) {
					at, _ := c.firstOccurrence(w)
					want = append(want, at.UTC())
				}
			}
			slices.SortFunc(want, func(a, b time.Time) int { return a.Compare(b) })
			want = slices.CompactFunc(want, func(a, b time.Time) bool { return a.Equal(b) })
			// Next, from before the first; compared while within the
			// middle day's instants (the edges of the slow way's range
			// miss times whose wall clock falls outside it).
			from, until := want[0].Add(-time.Second), d.day.Add(24*time.Hour)
			var got []time.Time
			for at := c.Next(from); at.Before(until); at = c.Next(at) {
				got = append(got, at)
			}
			want = slices.DeleteFunc(want, func(at time.Time) bool { return !at.Before(until) })
			if !slices.EqualFunc(got, want, func(a, b time.Time) bool { return a.Equal(b) }) {
				t.Errorf("%s in %s around %s:\n got  %v\n want %v", expr, d.zone, d.day.Format(time.DateOnly), got, want)
			}
		}
	}
}
