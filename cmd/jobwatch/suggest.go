package main

import (
	"flag"
	"fmt"
	"regexp"
	"strings"

	"github.com/jobwatch/jobwatch/internal/editdist"
)

// nearMisses are the names a person most likely meant by typed, a
// command or a flag they mistyped: those a letter or two away (one
// added, dropped, changed, or two side by side swapped: "sumbit",
// "lst", "paylod"), the nearest only; failing those, the names typed
// begins (two letters or more, at most three names: "sched"). None when
// nothing is that near: a guess further off would mislead more than it
// helps.
func nearMisses(typed string, names []string) []string {
	var near []string
	best := 2
	for _, name := range names {
		d := editdist.Distance(typed, name)
		if d >= len(typed) || d > best { // a name owes nothing to typed
			continue
		}
		if d < best {
			best, near = d, near[:0]
		}
		near = append(near, name)
	}
	if len(near) > 0 || len(typed) < 2 {
		return near
	}
	for _, name := range names {
		if strings.HasPrefix(name, typed) {
			near = append(near, name)
		}
	}
	if len(near) > 3 {
		return nil
	}
	return near
}

// didYouMean is "; did you mean X?" naming each of names as quote
// writes it ("X or Y", "X, Y or Z"), or "" for none.
func didYouMean(names []string, quote func(string) string) string {
	if len(names) == 0 {
		return ""
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = quote(n)
	}
	last := len(quoted) - 1
	if last == 0 {
		return "; did you mean " + quoted[0] + "?"
	}
	return "; did you mean " + strings.Join(quoted[:last], ", ") + " or " + quoted[last] + "?"
}

// commandNames are the commands usage lists, in its order: the names a
// mistyped command is matched against, so that a suggestion is always
// one the list shows.
func commandNames() []string {
	_, list, _ := strings.Cut(usage, "\nCommands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	for _, line := range strings.Split(list, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 {
			names = append(names, fields[0])
		}
	}
	return names
}

// undefinedFlag is the flag package's error for a flag its set does not
// define, and the name given.
var undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -(\S+)$`)

// withFlagSuggestion is err, the flag package's error, with the flag of
// fs nearest a flag it does not define when one is a near miss:
// "flag provided but not defined: -paylod; did you mean --payload?".
func withFlagSuggestion(fs *flag.FlagSet, err error) error {
	m := undefinedFlag.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	hint := didYouMean(nearMisses(m[1], names), func(name string) string { return "--" + name })
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w%s", err, hint)
}
