package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The watermark is the change sequence this store last saw the database
// at, kept in a file beside it (FILE-seen), outside the database: a copy
// restored in the database's place comes back with its change sequence
// behind the watermark, which nothing inside the copy can tell. The copy
// also has the identity its change cursors carry (migration 29), so
// without the watermark a cursor issued before the restore, and a
// WatchJobs resume token holding one, passes for the copy's own as soon
// as the copy's changes have caught up with it (idle, a server writes
// about once a second): the stream resumes past the copy's changes and
// its client keeps the newer states it had. So Open gives a database
// found behind its watermark a new identity, and every cursor issued
// before is another database's from then on (Store.CursorAhead): streams
// resumed with them start over, and say so.
//
// The file also lists the identities restores retired (the last
// maxRetired): the same copy restored a second time comes back with an
// identity retired before, and takes a new one again, though its change
// sequence may not be behind the watermark (the first restore's server
// wrote nothing). A database of another identity, not retired, is
// another database (a new file, one from elsewhere put in its place):
// cursors of the one before are another database's already.
//
// The file is rewritten every watermarkEvery while the store is open
// and at Close, so a copy taken while serve ran is caught once serve has
// stopped after it; after a crash the file may be up to that much
// behind. A missing file is written anew; one that cannot be read or
// written costs the detection, said in the log, and is never refused.
const (
	watermarkEvery = 5 * time.Second
	maxRetired     = 32
)

func watermarkPath(db string) string { return db + "-seen" }

// watermark is what the file holds.
type watermark struct {
	identity string
	seq      int64
	retired  []string // oldest first
}

// marker keeps a store's watermark file.
type marker struct {
	path    string
	written watermark // what the file holds, as last written
	failed  bool      // a write failed, and the log said so
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
}

// checkWatermark compares the database's change sequence and identity
// with the watermark beside it, draws the database a new identity when
// it is behind or its identity was retired, and writes the watermark.
func (s *Store) checkWatermark(ctx context.Context, db string) error {
	now, err := changeSeq(ctx, s.write)
	if err != nil {
		return err
	}
	s.mark.path = watermarkPath(db)
	w, err := readWatermark(s.mark.path)
	if err != nil {
		s.cfg.Logger.Warn("cannot read the file that tells a database restored from an older copy: a restore would go unnoticed at this start", "file", s.mark.path, "err", err)
	}
	if w.identity == s.identity && w.seq > now || slices.Contains(w.retired, s.identity) {
		old := s.identity
		if _, err := s.write.ExecContext(ctx, "UPDATE db_identity SET id = lower(hex(randomblob(8)))"); err != nil {
			return fmt.Errorf("give the database a new identity: %w", classify(err))
		}
		if s.identity, err = readIdentity(ctx, s.write); err != nil {
			return err
		}
		if !slices.Contains(w.retired, old) {
			w.retired = append(w.retired, old)
		}
		if len(w.retired) > maxRetired {
			w.retired = w.retired[len(w.retired)-maxRetired:]
		}
		s.cfg.Logger.Warn("the database is behind the changes a server last saw it at, or was restored before: restored from an older copy? It takes a new identity, so that clients following changes from before (WatchJobs resume tokens) start over",
			"db", db, "change", now, "seen", w.seq)
	}
	s.saveWatermark(watermark{identity: s.identity, seq: now, retired: w.retired})
	return nil
}

// readIdentity is the database's identity (migration 29).
func readIdentity(ctx context.Context, db *sql.DB) (string, error) {
	var id string
	if err := db.QueryRowContext(ctx, "SELECT id FROM db_identity").Scan(&id); err != nil {
		return "", fmt.Errorf("read the database's identity: %w", classify(err))
	}
	return id, nil
}

// keepWatermark rewrites the watermark every watermarkEvery, if the
// change sequence moved on, until Close, and once more then.
func (s *Store) keepWatermark() {
	defer close(s.mark.done)
	t := time.NewTicker(watermarkEvery)
	defer t.Stop()
	for stopped := false; !stopped; {
		select {
		case <-t.C:
		case <-s.mark.stop:
			stopped = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		now, err := changeSeq(ctx, s.read)
		cancel()
		if err == nil && now > s.mark.written.seq {
			w := s.mark.written
			w.seq = now
			s.saveWatermark(w)
		}
	}
}

// saveWatermark writes w to the watermark file: a new file renamed over
// the old one, readable by the database's owner only.
func (s *Store) saveWatermark(w watermark) {
	tmp, err := os.CreateTemp(filepath.Dir(s.mark.path), filepath.Base(s.mark.path)+".*")
	if err == nil {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %d\n", w.identity, w.seq)
		for _, id := range w.retired {
			fmt.Fprintf(&b, "retired %s\n", id)
		}
		_, err = tmp.WriteString(b.String())
		err = errors.Join(err, tmp.Close())
		if err == nil {
			err = os.Rename(tmp.Name(), s.mark.path)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	// What the file should hold: the next write is judged against it, so
	// that a file that cannot be written is not tried every interval.
	s.mark.written = w
	if err != nil && !s.mark.failed {
		s.mark.failed = true
		s.cfg.Logger.Warn("cannot write the file that lets serve tell a database restored from an older copy", "file", s.mark.path, "err", err)
	}
}

// readWatermark reads a watermark file; a missing one is the zero
// watermark, without error.
func readWatermark(path string) (watermark, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return watermark{}, nil
	case err != nil:
		return watermark{}, err
	case len(b) > 4096:
		return watermark{}, errors.New("not a watermark: too long")
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var w watermark
	id, n, found := strings.Cut(lines[0], " ")
	if w.seq, err = strconv.ParseInt(n, 10, 64); !found || id == "" || err != nil {
		return watermark{}, errors.New("not a watermark: its first line is not an identity and a change")
	}
	w.identity = id
	for _, l := range lines[1:] {
		if r, ok := strings.CutPrefix(l, "retired "); ok && r != "" {
			w.retired = append(w.retired, r)
		}
	}
	return w, nil
}
