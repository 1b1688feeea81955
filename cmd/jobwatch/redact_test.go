package main

import (
	"strings"
	"testing"
)

// TestServeLogsTheDatabaseURLWithoutPasswords: the --db that serve logs
// as it starts (and in "open database" errors) keeps no password, in the
// user part or in a password or sslpassword parameter.
func TestServeLogsTheDatabaseURLWithoutPasswords(t *testing.T) {
	tests := []struct{ db, want string }{
		{"postgres://jw:USERSECRET@db.internal:5432/jobs?sslmode=require", "postgres://jw:xxxxx@db.internal:5432/jobs?sslmode=require"},
		{"postgresql://jw@db/jobs?password=QUERYSECRET&sslmode=disable", "postgresql://jw@db/jobs?password=xxxxx&sslmode=disable"},
		{"postgres://db/jobs?SSLPassword=KEYSECRET", "postgres://db/jobs?SSLPassword=xxxxx"},
		{"jobwatch.db", "jobwatch.db"},
	}
	for _, tt := range tests {
		got := dbName(tt.db)
		if got != tt.want || strings.Contains(got, "SECRET") {
			t.Errorf("dbName(%q) = %q, want %q", tt.db, got, tt.want)
		}
	}
}
