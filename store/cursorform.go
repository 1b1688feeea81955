package store

import (
	"encoding/base64"
	"strings"
)

// IsChangeCursor reports whether c has the form of a change cursor some
// jobwatch store issues (Store.ChangeCursor): SQLite's, "c1." or "c2."
// and its parts (store/sqlite/listen.go), or PostgreSQL's, the base64 of
// 17 or 25 bytes led by its format (store/postgres/listen.go). A store's
// CursorAhead takes a cursor of the other backend's form for another
// database's (a server moved from SQLite to PostgreSQL, or back, whose
// clients resume with the cursors of the one before), and refuses what
// has neither form as no cursor at all.
func IsChangeCursor(c string) bool {
	if rest, ok := strings.CutPrefix(c, "c2."); ok {
		db, n, ok := strings.Cut(rest, ".")
		return ok && db != "" && n != ""
	}
	if rest, ok := strings.CutPrefix(c, "c1."); ok {
		return rest != ""
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	return err == nil && (len(b) == 25 && b[0] == 2 || len(b) == 17 && b[0] == 1)
}
