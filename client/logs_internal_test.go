package client

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// A line written without a newline is added in pieces of maxPartialLine
// bytes, each ending on a whole character: a character of several bytes
// that straddles a cut goes whole into the next piece, and no piece has
// U+FFFD where the writer wrote valid UTF-8.
func TestAWritersLongLineIsCutBetweenCharacters(t *testing.T) {
	var (
		mu   sync.Mutex
		sent []string
	)
	send := func(_ context.Context, lines []*jobwatchv1.AppendLogLine) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			sent = append(sent, l.GetText())
		}
		return false, nil
	}
	b := startLogBatcher(context.Background(), send, 8<<20, func(error) {}, Backoff{}, time.Second,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	text := strings.Repeat("€", 3*maxPartialLine/3+1000) // 3 bytes each, no newline
	for rest := []byte(text); len(rest) > 0; {
		n := min(len(rest), 4093) // writes that end mid-character
		b.write(jobwatchv1.LogStream_LOG_STREAM_STDOUT, rest[:n])
		rest = rest[n:]
	}
	if err := b.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) < 3 {
		t.Fatalf("%d lines sent, want the %d bytes in pieces", len(sent), len(text))
	}
	for i, line := range sent {
		if strings.ContainsRune(line, utf8.RuneError) || !strings.HasPrefix(line, "€") {
			t.Errorf("piece %d of %d starts %q and has U+FFFD: %v; want whole characters only",
				i, len(sent), line[:min(len(line), 6)], strings.ContainsRune(line, utf8.RuneError))
		}
	}
}
