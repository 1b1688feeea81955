package postgres

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/internal/pgtest"
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
