package wire_test

import (
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/wire"
)

// An integer a double cannot hold is refused with its path, wherever it
// is, saying what it would become; every number a double holds as
// written passes, and so do numbers written as floating point, and
// integers written as a double prints them (2^64 as encoding/json and
// JavaScript write it, which a JSON answer shows and a caller sends
// back).
func TestCheckExactJSON(t *testing.T) {
	for _, ok := range []string{`1`, `-9007199254740992`, `{"a":[9007199254740992, 1.5, 1e300, 12345678901234567890.5]}`, `"9007199254740993"`, `null`,
		`18446744073709552000`, `-18446744073709552000`, `1000000000000000000000000`} {
		if err := wire.CheckExactJSON([]byte(ok), "payload"); err != nil {
			t.Errorf("%s: %v, want it passed", ok, err)
		}
	}
	for in, want := range map[string]string{
		`9007199254740993`:                            "payload: 9007199254740993 is an integer beyond ±2^53 (9007199254740992) that a number in a JSON payload or result cannot hold: it would come back as 9007199254740992; send it as a string",
		`18446744073709551615`:                        "payload: 18446744073709551615 is an integer beyond ±2^53 (9007199254740992) that a number in a JSON payload or result cannot hold: it would come back as 18446744073709552000",
		"1" + strings.Repeat("0", 400):                "payload: 1000",
		`{"b":1,"a":[0,{"x":-99999999999999999999}]}`: "payload.a[1].x: -99999999999999999999 is an integer",
	} {
		if err := wire.CheckExactJSON([]byte(in), "payload"); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
