package jobs

import (
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// The limits of what a caller or a worker may hand the engine, and the
// checks of names, text and JSON, live in package jobtype, so that the
// files read without the engine (configuration, tokens) keep the same
// rules. What is left here needs the engine's clock.

// CheckTime refuses, as a *jobtype.InvalidError naming field, a time a
// caller gave that is more than jobtype.MaxTimeOffset from now, either
// way, and the zero time (0001-01-01T00:00:00Z), which callers mean as
// "unset": leave the field out for that. Submit checks RunAt with it; a server calls it for
// a time the caller sent, since the zero time is also SubmitRequest's
// "unset".
func (e *Engine) CheckTime(field string, t time.Time) error {
	return checkTime(field, t, e.now())
}

func checkTime(field string, t, now time.Time) error {
	if t.IsZero() {
		return &jobtype.InvalidError{Field: field, Reason: "0001-01-01T00:00:00Z is no time: leave " + field + " out to mean now"}
	}
	earliest, latest := now.Add(-jobtype.MaxTimeOffset), now.Add(jobtype.MaxTimeOffset)
	if t.Before(earliest) || t.After(latest) {
		return &jobtype.InvalidError{Field: field, Reason: "must be within 100 years of now, between " +
			earliest.UTC().Format(time.RFC3339) + " and " + latest.UTC().Format(time.RFC3339) +
			", got " + t.UTC().Format(time.RFC3339Nano)}
	}
	return nil
}
