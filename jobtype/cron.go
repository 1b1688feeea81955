package jobtype

import (
	"fmt"
	"strings"
	"time"
	// The binary carries the IANA zone database, so a schedule's
	// timezone reads the same on a machine (or a container image)
	// without one.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Cron is a schedule's cron expression read in its time zone: the times
// it names, in order. Parse it with ParseCron.
type Cron struct {
	// spec reads wall-clock times (its Location is UTC, standing for
	// the clock on the wall of loc), so daylight saving is decided by
	// Next alone, one way.
	spec *cron.SpecSchedule
	loc  *time.Location
}

// cronParser reads the five standard fields (minute, hour, day of month,
// month, day of week) and the descriptors @yearly, @annually, @monthly,
// @weekly, @daily, @midnight and @hourly. Its runner is not used: the
// engine's sweep decides when a run is due (store.ScheduleRun.Step).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSyntax is what a cron expression may be, for the reason of a
// refusal.
const cronSyntax = "five fields (minute hour day-of-month month day-of-week, the days of the week 0 for Sunday to 6, such as \"0 2 * * 1-5\") or one of @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly"

// ParseCron reads expr, a cron expression, in the IANA time zone
// timezone ("" is UTC). A mistake is an *InvalidError whose Field is
// "cron" or "timezone" and whose Reason quotes nothing of expr (it goes
// to logs, and a value pasted into the wrong key may be a secret):
// "@every" (a schedule's every says that) and a "TZ=" prefix (its
// timezone says that) are refused, and so is an expression that names no
// time at all, such as February 30, and the zone "Local", which would
// mean whatever zone each machine is set to.
func ParseCron(expr, timezone string) (*Cron, error) {
	loc, err := cronLocation(timezone)
	if err != nil {
		return nil, err
	}
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return nil, &InvalidError{Field: "cron", Reason: "must not be empty; give " + cronSyntax}
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, &InvalidError{Field: "cron", Reason: "must not name a time zone; give it as timezone"}
	case strings.HasPrefix(expr, "@every"):
		return nil, &InvalidError{Field: "cron", Reason: "must not be @every; give the period as every instead of cron"}
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, &InvalidError{Field: "cron", Reason: cronReason(err)}
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok { // only @every makes another kind, refused above
		return nil, &InvalidError{Field: "cron", Reason: "must be " + cronSyntax}
	}
	spec.Location = time.UTC
	c := &Cron{spec: spec, loc: loc}
	// The parser looks five years ahead; an expression matching nothing
	// in the five years from any date matches nothing ever (the
	// calendar repeats leap days within four).
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, &InvalidError{Field: "cron", Reason: "names no time that exists (such as the 30th of February)"}
	}
	return c, nil
}

// cronReason is why the parser refused an expression, without the text
// of the expression it quotes, with what the expression may be.
func cronReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 {
		msg = msg[:i]
	}
	switch {
	case strings.HasPrefix(msg, "failed to parse int from"):
		msg = "a field holds something other than numbers or names with *, -, / and ,"
	case strings.HasPrefix(msg, "unrecognized descriptor"):
		msg = "unknown descriptor"
	}
	return fmt.Sprintf("does not parse (%s); give %s", msg, cronSyntax)
}

// cronLocation is the zone timezone names, "" being UTC.
func cronLocation(timezone string) (*time.Location, error) {
	if timezone == "" {
		return time.UTC, nil
	}
	if timezone == "Local" {
		return nil, &InvalidError{Field: "timezone", Reason: "must name a zone, such as Europe/Berlin or UTC: Local would depend on each machine's setting"}
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil {
		return nil, &InvalidError{Field: "timezone", Reason: "is not a known IANA time zone name, such as Europe/Berlin or UTC"}
	}
	return loc, nil
}

// Next returns the first of c's times strictly after t, in UTC; zero if
// there is none within five years. c's times are wall-clock times in its
// time zone, each taken once a day it names, across daylight saving:
//   - on the day the clocks go forward, a time in the hour they skip is
//     read with the offset before the change (in Europe/Berlin 02:30,
//     which does not exist, is 03:30 summer time), so a daily run is not
//     lost that day; times of the skipped hour that fall on one instant
//     (02:00 and 03:00) are one time;
//   - on the day the clocks go back, a time in the hour they repeat is
//     its first occurrence only (02:30 summer time, not 02:30 winter
//     time an hour later), so a daily run does not run twice.
//
// The parser's own Next, read in the zone, would skip the day in the
// first case and run twice in the second.
func (c *Cron) Next(t time.Time) time.Time {
	next := c.nextFrom(wallClock(t.In(c.loc)), t)
	// Within hours of the clocks going forward, the skipped times read
	// with the offset before the change (each after t, 02:10 to 02:50 as
	// 03:10 to 03:50 when t is 03:00) come before t's own clock in
	// wall-clock order: look from t's clock at that offset too, and take
	// whichever instant comes first.
	_, now := t.In(c.loc).Zone()
	if _, before := t.Add(-3 * time.Hour).In(c.loc).Zone(); before < now {
		skipped := c.nextFrom(wallClock(t.In(time.FixedZone("", before))), t)
		if !skipped.IsZero() && (next.IsZero() || skipped.Before(next)) {
			next = skipped
		}
	}
	return next
}

// nextFrom is the first occurrence after t of c's wall-clock times after
// wall, in UTC; zero if there is none. Wall-clock order is the order of
// the instants but for a skipped time, read with the offset before the
// change: a time of the clock after the change less than the gap later
// (02:40 after 02:20 where the clocks go from 02:00 to 02:30) comes
// first, so those are looked at too.
func (c *Cron) nextFrom(wall, t time.Time) time.Time {
	for {
		next := c.spec.Next(wall)
		if next.IsZero() {
			return next
		}
		at, gap := c.firstOccurrence(next)
		if !at.After(t) {
			// A wall-clock time of the repeated hour whose instant is not
			// after t: its first occurrence is past.
			wall = next
			continue
		}
		for later := c.spec.Next(next); gap > 0 && !later.IsZero() && later.Before(next.Add(gap)); later = c.spec.Next(later) {
			if other, _ := c.firstOccurrence(later); other.After(t) && other.Before(at) {
				at = other
			}
		}
		return at.UTC()
	}
}

// firstOccurrence is the first instant whose clock in c's zone shows
// wall (figures in UTC, as wallClock gives them). time.Date gives the
// second one when the clocks go back. A wall time the clocks skip when
// they go forward is the instant the clock before the change would have
// shown it at: 02:30 in a zone that goes from 02:00 to 03:00 is 03:30
// of the new time; gap is then how far the clocks went forward, else 0.
// (time.Date leaves a skipped time's instant unspecified; it gives 01:30
// of the old time west of Greenwich.)
func (c *Cron) firstOccurrence(wall time.Time) (at time.Time, gap time.Duration) {
	at = time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, c.loc)
	if !wallClock(at.In(c.loc)).Equal(wall) {
		// Skipped. A day before wall, read as UTC, is before the change
		// in every zone (offsets are within ±14 hours), and zones do not
		// change twice within days.
		_, before := wall.Add(-24 * time.Hour).In(c.loc).Zone()
		at = wall.Add(-time.Duration(before) * time.Second)
		_, after := at.In(c.loc).Zone()
		return at, time.Duration(after-before) * time.Second
	}
	_, offset := at.Zone()
	// Zones change their offset at most a few times a year, never twice
	// within hours.
	_, before := at.Add(-3 * time.Hour).Zone()
	if before <= offset {
		return at, 0
	}
	earlier := at.Add(-time.Duration(before-offset) * time.Second)
	if wallClock(earlier.In(c.loc)).Equal(wall) {
		return earlier, 0
	}
	return at, 0
}

// wallClock is the time t's clock shows, as the same figures in UTC.
func wallClock(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// Location is the time zone c's times are read in.
func (c *Cron) Location() *time.Location { return c.loc }
