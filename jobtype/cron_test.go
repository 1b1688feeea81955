package jobtype_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// times lists c's first n times after from, each as the clock in c's
// zone shows it.
func times(c *jobtype.Cron, from time.Time, n int) string {
	var out []string
	for range n {
		from = c.Next(from)
		out = append(out, from.In(c.Location()).Format("01-02 15:04Z07"))
	}
	return strings.Join(out, ", ")
}

// Each time runs once on the day it names, in a zone east of Greenwich
// and in one west of it, where time.Date puts a skipped time an hour
// early and the schedule must not.
func TestCronTimesAcrossDaylightSavingRunOnceEachDay(t *testing.T) {
	tests := []struct {
		name, zone, expr string
		from             time.Time
		want             string
	}{
		{"a daily time in the skipped hour runs an hour later on the clock, that day only", "Europe/Berlin", "30 2 * * *",
			time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), "03-29 03:30+02, 03-30 02:30+02, 03-31 02:30+02"},
		{"a daily time in the repeated hour runs at its first occurrence only", "Europe/Berlin", "30 2 * * *",
			time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), "10-25 02:30+02, 10-26 02:30+01, 10-27 02:30+01"},
		{"half-hourly times of the skipped hour fall on the change, once", "Europe/Berlin", "*/30 1-3 * * *",
			time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), "03-29 01:30+01, 03-29 03:00+02, 03-29 03:30+02, 03-30 01:00+02"},
		{"half-hourly times of the repeated hour run once", "Europe/Berlin", "*/30 2-3 * * *",
			time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC), "10-25 02:00+02, 10-25 02:30+02, 10-25 03:00+01, 10-25 03:30+01"},
		{"@daily is midnight in the zone", "Europe/Berlin", "@daily",
			time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), "12-02 00:00+01, 12-03 00:00+01"},
		{"west: a daily time in the skipped hour runs an hour later on the clock, that day only", "America/New_York", "30 2 * * *",
			time.Date(2027, 3, 13, 12, 0, 0, 0, time.UTC), "03-14 03:30-04, 03-15 02:30-04, 03-16 02:30-04"},
		{"west: a daily time in the repeated hour runs at its first occurrence only", "America/New_York", "30 1 * * *",
			time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC), "11-01 01:30-04, 11-02 01:30-05, 11-03 01:30-05"},
		{"every time of the skipped hour runs, each read with the offset before the change", "Europe/Berlin", "*/10 2 * * *",
			time.Date(2027, 3, 27, 12, 0, 0, 0, time.UTC),
			"03-28 03:00+02, 03-28 03:10+02, 03-28 03:20+02, 03-28 03:30+02, 03-28 03:40+02, 03-28 03:50+02, 03-29 02:00+02"},
		{"times of the skipped hour and of the hour after it that fall on one instant are one time", "Europe/Berlin", "5,50 2-3 * * *",
			time.Date(2027, 3, 28, 0, 0, 0, 0, time.UTC), "03-28 03:05+02, 03-28 03:50+02, 03-29 02:05+02"},
		{"a skipped time read later than a time after the change runs after it", "Australia/Lord_Howe", "20,40 2 * * *",
			time.Date(2026, 10, 3, 12, 0, 0, 0, time.UTC), "10-04 02:40+11, 10-04 02:50+11, 10-05 02:20+11"},
		{"west: every time of the skipped hour runs", "America/New_York", "0,30 2 * * *",
			time.Date(2027, 3, 13, 12, 0, 0, 0, time.UTC), "03-14 03:00-04, 03-14 03:30-04, 03-15 02:00-04"},
		{"west: half-hourly times of the skipped hour fall on the change, once", "America/New_York", "*/30 1-3 * * *",
			time.Date(2027, 3, 14, 5, 0, 0, 0, time.UTC), "03-14 01:00-05, 03-14 01:30-05, 03-14 03:00-04, 03-14 03:30-04, 03-15 01:00-04"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := jobtype.ParseCron(tt.expr, tt.zone)
			if err != nil {
				t.Fatal(err)
			}
			if got := times(c, tt.from, strings.Count(tt.want, ",")+1); got != tt.want {
				t.Errorf("times %s\nwant  %s", got, tt.want)
			}
		})
	}
}

func TestParseCronRefusesWithoutQuotingTheExpression(t *testing.T) {
	tests := []struct{ name, expr, zone, want string }{
		{"three fields", "0 2 *", "", "cron: does not parse (expected exactly 5 fields, found 3)"},
		{"a word for a field", "hunter2 * * * *", "", "cron: does not parse (a field holds something other than numbers"},
		{"seconds", "0 0 2 * * *", "", "found 6"},
		{"an unknown descriptor", "@nightly", "", "cron: does not parse (unknown descriptor)"},
		{"@every", "@every 1h", "", "cron: must not be @every"},
		{"a zone prefix", "TZ=Europe/Berlin", "", "cron: must not name a time zone"},
		{"no time that exists", "0 0 31 4 *", "", "cron: names no time that exists"},
		{"an unknown zone", "0 2 * * *", "Europe/Atlantis", "timezone: is not a known IANA time zone name"},
		{"the machine's zone", "0 2 * * *", "Local", "timezone: must name a zone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jobtype.ParseCron(tt.expr, tt.zone)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseCron: %v; want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "Atlantis") {
				t.Errorf("the refusal quotes the value: %v", err)
			}
		})
	}
}
