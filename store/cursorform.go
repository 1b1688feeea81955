package store

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// The backends whose change cursors CursorBackend tells apart.
const (
	SQLiteCursor   = "sqlite"
	PostgresCursor = "postgres"
)

// CursorBackend says which backend's form change cursor c has
// (Store.ChangeCursor): SQLiteCursor for "c1." or "c2." and its parts
// (store/sqlite/listen.go), PostgresCursor for the base64 of 17 or 25
// bytes led by its format (store/postgres/listen.go), "" for neither. A
// store's CursorAhead takes a cursor of the other backend's form for
// another database's (a server moved from SQLite to PostgreSQL, or back,
// whose clients resume with the cursors of the one before); what has no
// backend's form, or its own form but does not decode, is no cursor.
func CursorBackend(c string) string {
	if rest, ok := strings.CutPrefix(c, "c2."); ok {
		db, n, ok := strings.Cut(rest, ".")
		if ok && len(db) <= 32 && strings.Trim(db, "0123456789abcdef") == "" && db != "" && sequence(n) {
			return SQLiteCursor
		}
		return ""
	}
	if n, ok := strings.CutPrefix(c, "c1."); ok {
		if sequence(n) {
			return SQLiteCursor
		}
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil && (len(b) == 25 && b[0] == 2 || len(b) == 17 && b[0] == 1) {
		return PostgresCursor
	}
	return ""
}

// sequence reports whether n is a SQLite cursor's change sequence: base
// 36, not negative, at most 13 digits.
func sequence(n string) bool {
	v, err := strconv.ParseInt(n, 36, 64)
	return err == nil && v >= 0 && len(n) <= 13 && n == strings.ToLower(n)
}
