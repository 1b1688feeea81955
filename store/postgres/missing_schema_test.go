package postgres

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A search_path naming a schema that does not exist is refused with an
// error that names the schema and the statement that creates it:
// jobwatch creates its tables, never the schema.
func TestOpenNamesTheMissingSchemaAndHowToCreateIt(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, searchPath, want string }{
		{"one schema", "jw_no_such_schema", "schema jw_no_such_schema does not exist"},
		{"a list", "jw_no_such_schema, jw_nor_this", "schema jw_no_such_schema does not exist (search_path is jw_no_such_schema, jw_nor_this)"},
		{"a name that needs quotes", `"JW No Such"`, `create it first with CREATE SCHEMA "JW No Such"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := u.Query()
			q.Set("search_path", tt.searchPath)
			// libpq's URLs, which pgx follows, take %20 for a space, not +.
			u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
			s, err := Open(t.Context(), u.String())
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded without the schema")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "CREATE SCHEMA ") {
				t.Fatalf("Open: %v\nwant it to say %q and how to create the schema", err, tt.want)
			}
		})
	}
}

// A schema renamed (or a dump restored under another name) keeps the
// old name in its trigger functions: an outside probe's renamed schema
// served reads, and every write failed with "the database is busy or
// unavailable". Open refuses it, naming both schemas and the way back,
// and opens it again once it has its name back.
func TestOpenRefusesASchemaRenamedFromTheOneItsFunctionsName(t *testing.T) {
	base := pgtest.URL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	s, err := Open(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(t.Context(), jobtype.Job{ID: "j_before", Tenant: "default", Kind: "k", Queue: "default", State: jobtype.Queued, Version: 1, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	renamed := schema + "_renamed"
	rename := func(from, to string) {
		t.Helper()
		if _, err := s.pool.Exec(t.Context(), "ALTER SCHEMA "+from+" RENAME TO "+to); err != nil {
			t.Fatal(err)
		}
	}
	rename(schema, renamed)
	isRenamed := true
	defer func() {
		if isRenamed {
			rename(renamed, schema) // for pgtest to drop it
		}
	}()
	q := u.Query()
	q.Set("search_path", renamed)
	u.RawQuery = q.Encode()
	_, err = Open(t.Context(), u.String())
	if err == nil || !strings.Contains(err.Error(), `schema "`+renamed+`" holds jobwatch's trigger functions as written for schema "`+schema+`"`) ||
		!strings.Contains(err.Error(), `ALTER SCHEMA "`+renamed+`" RENAME TO "`+schema+`"`) {
		t.Fatalf("Open of the renamed schema: %v\nwant it refused, naming both schemas and the way back", err)
	}
	rename(renamed, schema)
	isRenamed = false
	back, err := Open(t.Context(), base)
	if err != nil {
		t.Fatalf("Open once the schema had its name back: %v", err)
	}
	defer back.Close()
	if _, err := back.GetJob(t.Context(), "j_before"); err != nil {
		t.Errorf("the job written before: %v", err)
	}
}
