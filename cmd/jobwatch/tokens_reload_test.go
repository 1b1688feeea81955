package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// records is a slog.Handler that keeps every record, so a test can check
// the level and attributes of what a user would read in the log.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// last returns the last record as "LEVEL message key=value ...".
func (r *records) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.list) == 0 {
		return ""
	}
	rec := r.list[len(r.list)-1]
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	return b.String()
}

type tokenSink struct{ set []*auth.Tokens }

func (s *tokenSink) SetTokens(t *auth.Tokens) { s.set = append(s.set, t) }

func TestTokensReloadRefusesAFileThatListsNoTokenAndWarnsWhenTheCountChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	two := "tokens:\n" + tokensEntry("jw_a", "role: admin") + tokensEntry("jw_b", "role: client, tenant: acme")
	one := "tokens:\n" + tokensEntry("jw_a", "role: admin")
	rec := &records{}
	sink := &tokenSink{}
	r := &tokenReloads{srv: sink, path: path, log: slog.New(rec), known: 2}

	steps := []struct {
		name, file string
		want       []string // in the last log line
		swapped    bool     // the server got the new file
	}{
		{"an empty file (a half-written copy)", "", []string{"ERROR tokens reload refused; the tokens in effect stay", "tokens_known=2", "the file lists no token", `write "tokens: []"`}, false},
		{"a file of comments only", "# rotating\n", []string{"ERROR tokens reload refused", "tokens_known=2"}, false},
		{"a file without the tokens key", "{}\n", []string{"ERROR tokens reload refused", "lists no token"}, false},
		{"one token fewer", one, []string{"WARN tokens reloaded: the number of tokens changed", "tokens_before=2", "tokens_known=1"}, true},
		{"the same count", one, []string{"INFO tokens reloaded", "tokens_before=1", "tokens_known=1"}, true},
		{"one token more", two, []string{"WARN tokens reloaded: the number of tokens changed", "tokens_before=1", "tokens_known=2"}, true},
		{"tokens: [] on purpose", "tokens: []\n", []string{"WARN tokens reloaded: the file says tokens: [], so every call but GetServerInfo and the health checks is now refused", "tokens_before=2", "tokens_known=0"}, true},
	}
	for _, step := range steps {
		writeFile(t, path, step.file)
		before := len(sink.set)
		r.reload()
		if swapped := len(sink.set) > before; swapped != step.swapped {
			t.Errorf("%s: the server got the file: %v, want %v", step.name, swapped, step.swapped)
		}
		line := rec.last()
		for _, want := range step.want {
			if !strings.Contains(line, want) {
				t.Errorf("%s: the log says %q, want %q in it", step.name, line, want)
			}
		}
	}
}

func TestServeRefusesATokensFileThatListsNoTokenAtStart(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "tokens.yaml")
	writeFile(t, empty, "")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--db", testdb.New(t), "--tokens", empty}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "tokens.yaml: the file lists no token") {
		t.Fatalf("an empty tokens file at start: exit %d, %s", code, stderr.String())
	}
}

// TestServeKeepsItsTokensWhenSIGHUPFindsAnEmptyFile is the case
// end to end: a half-written (empty) tokens file on SIGHUP is refused and
// the token in effect keeps working; "tokens: []" locks everyone out, at
// warn; so does starting with it.
func TestServeKeepsItsTokensWhenSIGHUPFindsAnEmptyFile(t *testing.T) {
	dir := t.TempDir()
	tokensFile := filepath.Join(dir, "tokens.yaml")
	const token = "jw_acme-token"
	writeFile(t, tokensFile, "tokens:\n"+tokensEntry(token, "role: client, tenant: acme"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--tokens", tokensFile)
	c := client.New(base, client.WithToken(token))
	t.Cleanup(c.Close)
	get := func() error {
		_, err := c.JobService().GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: "00000000-0000-0000-0000-000000000000"})
		return err
	}
	if err := get(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("with the token: %v, want not_found (let in)", err)
	}

	writeFile(t, tokensFile, "")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to refuse the empty file", func() bool { return strings.Contains(logs.String(), "tokens reload refused") })
	if !strings.Contains(logs.String(), "the file lists no token") {
		t.Errorf("the refusal does not say why:\n%s", logs.String())
	}
	if err := get(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("after the refused reload: %v, want the token still let in", err)
	}

	writeFile(t, tokensFile, "tokens: []\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to take tokens: []", func() bool { return strings.Contains(logs.String(), "now refused") })
	if !strings.Contains(logs.String(), `level=WARN msg="tokens reloaded: the file says tokens: []`) ||
		!strings.Contains(logs.String(), "tokens_before=1 tokens_known=0") {
		t.Errorf("the lock-out is not logged at warn with both counts:\n%s", logs.String())
	}
	if err := get(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("after tokens: []: %v, want unauthenticated", err)
	}

	// Starting with tokens: [] is allowed too, and says so at warn.
	_, _, logs2 := startServe(t, ctx, "--db", testdb.New(t), "--tokens", tokensFile)
	if !strings.Contains(logs2.String(), "level=WARN") || !strings.Contains(logs2.String(), "tokens_known=0") {
		t.Errorf("a start with tokens: [] does not warn:\n%s", logs2.String())
	}
}
