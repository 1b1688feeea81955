package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Fingerprint names the rules f declares, whatever file they came from
// and however it is laid out (comments, order of keys, spacing): the
// first 12 hex digits of a SHA-256 of the rules as read. Replicas that
// serve under the same rules show the same fingerprint (serve logs it,
// and /metrics' jobwatch_config_info has it), so an operator can see a
// replica left with other rules, which it would enforce on its own
// claims: a serial queue parallel on one replica, another bound.
func (f *File) Fingerprint() string {
	rules := *f
	rules.Path = "" // where the file is, not what it says
	b, err := json.Marshal(rules)
	if err != nil {
		// Every field is a string, number, bool, slice or map of them.
		panic("config: fingerprint: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
