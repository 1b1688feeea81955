package sqlite

import (
	"strings"
	"testing"
)

// A tenant's feed reads only the jobs that changed after its cursor, in
// change order, from the index: never the tenant's other jobs.
func TestChangesSinceACursorReadOnlyTheChangedJobsByIndex(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	query := "SELECT " + summaryColumns + ", change_seq FROM jobs WHERE 1 = 1 AND tenant = ? AND change_seq > ? ORDER BY change_seq, seq"
	joined := strings.Join(explain(t, s.read, query, "acme", int64(5)), "\n")
	if !strings.Contains(joined, "USING INDEX jobs_tenant_change (tenant=? AND change_seq>?)") ||
		strings.Contains(joined, "TEMP B-TREE") || strings.Contains(joined, "SCAN") {
		t.Errorf("plan:\n%s\nwant the tenant's changes by index, in its order", joined)
	}
}
