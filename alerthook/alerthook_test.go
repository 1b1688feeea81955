package alerthook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/backoff"
)

// logLines is a slog.Handler that keeps every record as the line a user
// reads: "LEVEL message key=value ...".
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func fingerprint(u string) string {
	sum := sha256.Sum256([]byte(u))
	return "sha256:" + hex.EncodeToString(sum[:])[:FingerprintLength]
}

// TestAFailingWebhookNeverLogsItsSecret: whatever way a delivery fails
// (the receiver answers 500, redirects to another secret URL, refuses the
// connection, or the URL does not parse), every log line names the hook by
// scheme, host and fingerprint, and none carries the path or the query.
func TestAFailingWebhookNeverLogsItsSecret(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/hook/") {
			http.Redirect(w, r, "/moved/REDIRECTSECRET?key=REDIRECTSECRET", http.StatusTemporaryRedirect)
			return
		}
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer failing.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	tests := []struct {
		name, url, host string
		why             string // in the giving-up line
	}{
		{"the receiver answers 500 after a redirect", failing.URL + "/hook/T000/B000/XSECRETX?key=QSECRETQ", failing.URL, "500 Internal Server Error"},
		{"the connection is refused", "http://user:PSECRETP@" + closedAddr + "/hook/T000/B000/XSECRETX?key=QSECRETQ", "http://" + closedAddr, "connection refused"},
		{"the URL does not parse", "http://" + closedAddr + "/hook/XSECRETX/%zz?key=QSECRETQ", "(a URL that does not parse)", "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &logLines{}
			done := make(chan struct{})
			defer close(done)
			h := New(slog.New(logs), done)
			h.retry = backoff.Policy{Initial: time.Millisecond, Max: MaxBackoff}
			h.Send(tt.url, Event{Queue: "q", Alerting: true})
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(logs.all(), "giving up") {
				if time.Now().After(deadline) {
					t.Fatalf("no giving-up line within 20s:\n%s", logs.all())
				}
				time.Sleep(5 * time.Millisecond)
			}
			all := logs.all()
			for _, secret := range []string{"XSECRETX", "QSECRETQ", "PSECRETP", "REDIRECTSECRET", "/hook/", "key="} {
				if strings.Contains(all, secret) {
					t.Errorf("the log carries %q:\n%s", secret, all)
				}
			}
			want := tt.host + " " + fingerprint(tt.url)
			for _, line := range strings.Split(all, "\n") {
				if !strings.Contains(line, "webhook="+want) {
					t.Errorf("a line does not name the hook as %q: %s", want, line)
				}
			}
			if !strings.Contains(all, tt.why) {
				t.Errorf("the log does not say why (%q):\n%s", tt.why, all)
			}
		})
	}
}

func TestDescribeShowsSchemeHostAndFingerprintOnly(t *testing.T) {
	u := "https://bot:pw@hooks.example.org:8443/services/T0/B0/secret?token=secret#frag"
	got := Describe(u)
	if want := "https://hooks.example.org:8443 " + fingerprint(u); got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if Describe(u) == Describe(strings.Replace(u, "B0", "B1", 1)) {
		t.Error("two hooks of one host have one fingerprint")
	}
}
