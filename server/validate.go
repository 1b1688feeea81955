package server

import (
	"encoding/json"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/wire"
)

// Every limit on what a request carries (names, keys, tokens, filters,
// steps, errors, payload size and depth) is the engine's, in package jobs,
// so that an in-process caller meets the same rules; the handlers decode
// and hand over, and toConnectError maps the engine's refusals. What is
// left here are the helpers the handlers use.

// invalid is invalid_argument for one field, worded "field: reason".
func invalid(field, reason string) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New(field+": "+reason))
}

// jsonField converts a payload or result to JSON, naming the field in
// the error; its size and depth are the engine's to check.
func jsonField(field string, v *structpb.Value) (json.RawMessage, error) {
	raw, err := wire.JSON(v)
	if err != nil {
		return nil, invalid(field, wire.DecodeMistake(err, nil))
	}
	return raw, nil
}
