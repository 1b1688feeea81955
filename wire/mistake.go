package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jobwatch/jobwatch/jobtype"
)

// DecodeMistake says what a protobuf library's decode error about data
// (JSON or protobuf's binary form) means to the person who wrote data:
// the library's words without their "proto:" (followed by a space or, at
// random, a no-break space), which names a library, not the mistake; and
// for a JSON string with an escaped half of a surrogate pair (\ud800
// alone), which protojson calls an unexpected EOF or an invalid escape
// code though encoding/json takes it, what it is; for nesting past the
// library's recursion limit, the limit a payload has; and for data that
// is empty or blank, that it is (nil data: not known). The server and the command line say it
// alike.
func DecodeMistake(err error, data []byte) string {
	msg := err.Error()
	if data != nil && len(bytes.TrimSpace(data)) == 0 { // nil: the data is not known
		return "it is empty: JSON has at least a value, such as {}, \"text\" or null"
	}
	if strings.Contains(msg, "exceeded max recursion depth") || strings.Contains(msg, "exceeded maximum recursion depth") {
		// Far past what the engine takes, so say that limit.
		return fmt.Sprintf("its arrays and objects are nested too deep to decode: a payload or result may be nested %d levels at most", jobtype.MaxJSONDepth)
	}
	if (strings.Contains(msg, "unexpected EOF") || strings.Contains(msg, "invalid escape code")) && json.Valid(data) {
		return "a JSON string holds an escaped half of a UTF-16 surrogate pair (\\ud800 to \\udfff) without its other half, which is not text"
	}
	for _, prefix := range []string{"proto: ", "proto:\u00a0"} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return msg
}
