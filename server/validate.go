package server

import (
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/wire"
)

// Shape limits checked before a request reaches the engine. They keep ids
// and names printable in a log line and cheap to index; the engine checks
// meaning (a kind is required, a state fits), the server checks shape.
const (
	maxIDBytes           = 128 // job_id, lease_id
	maxNameBytes         = 128 // tenant, kind, queue, worker_id
	maxUniqueKeyBytes    = 128
	maxStepBytes         = 1024
	maxErrorTypeBytes    = 256
	maxErrorMessageBytes = 4096
	maxPageSize          = 500
	defaultPageSize      = 50
	maxFilterItems       = 100 // kinds, queues, states in one request
)

// invalid is invalid_argument for one field, worded "field: reason".
func invalid(field, reason string) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New(field+": "+reason))
}

// checkID checks a required identifier such as job_id or lease_id.
func checkID(field, v string) error {
	if v == "" {
		return invalid(field, "must not be empty")
	}
	return checkLen(field, v, maxIDBytes)
}

// checkName checks a name that may be empty (a default applies) but not
// too long.
func checkName(field, v string) error { return checkLen(field, v, maxNameBytes) }

func checkLen(field, v string, limit int) error {
	if len(v) > limit {
		return invalid(field, fmt.Sprintf("must be at most %d bytes, got %d", limit, len(v)))
	}
	return nil
}

// checkNames checks a filter list: each entry a non-empty name.
func checkNames(field string, vs []string) error {
	if len(vs) > maxFilterItems {
		return invalid(field, fmt.Sprintf("must list at most %d entries, got %d", maxFilterItems, len(vs)))
	}
	for i, v := range vs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if v == "" {
			return invalid(f, "must not be empty")
		}
		if err := checkName(f, v); err != nil {
			return err
		}
	}
	return nil
}

// pageSize applies the default and the cap of the API to a page_size.
func pageSize(v int32) (int, error) {
	switch {
	case v < 0:
		return 0, invalid("page_size", "must not be negative")
	case v == 0:
		return defaultPageSize, nil
	case v > maxPageSize:
		return maxPageSize, nil
	}
	return int(v), nil
}

// jsonField converts a payload or result to JSON and enforces the size
// limit, naming the field in the error.
func (s *Server) jsonField(field string, v *structpb.Value) (json.RawMessage, error) {
	raw, err := wire.JSON(v)
	if err != nil {
		return nil, invalid(field, err.Error())
	}
	if len(raw) > s.cfg.MaxPayloadBytes {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("%s: %d bytes as JSON is over the limit of %d", field, len(raw), s.cfg.MaxPayloadBytes))
	}
	return raw, nil
}
