package wire_test

import (
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/wire"
)

// An integer a double cannot hold is refused with its path, wherever it
// is; every number a double holds as written passes, and so do numbers
// written as floating point.
func TestCheckExactJSON(t *testing.T) {
	for _, ok := range []string{`1`, `-9007199254740992`, `{"a":[9007199254740992, 1.5, 1e300, 12345678901234567890.5]}`, `"9007199254740993"`, `null`} {
		if err := wire.CheckExactJSON([]byte(ok), "payload"); err != nil {
			t.Errorf("%s: %v, want it passed", ok, err)
		}
	}
	for in, want := range map[string]string{
		`9007199254740993`: "payload: 9007199254740993 is an integer beyond ±2^53",
		`{"b":1,"a":[0,{"x":-99999999999999999999}]}`: "payload.a[1].x: -99999999999999999999 is an integer",
	} {
		if err := wire.CheckExactJSON([]byte(in), "payload"); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
