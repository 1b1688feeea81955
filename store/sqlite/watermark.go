package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// The file is rewritten every watermarkEvery while the store is open
// and at Close, so a copy taken while serve ran is caught once serve has
// stopped after it; a crash loses at most the last interval's worth. A
// missing or unreadable file is written anew, and failing to write it
// only costs the detection: it is logged, never refused.
const watermarkEvery = 5 * time.Second

func watermarkPath(db string) string { return db + "-seen" }

// checkWatermark compares the database's change sequence with the
// watermark beside it, draws the database a new identity when it is
// behind, and writes the watermark.
func (s *Store) checkWatermark(ctx context.Context, db string) error {
	now, err := changeSeq(ctx, s.write)
	if err != nil {
		return err
	}
	id, seen, ok := readWatermark(watermarkPath(db))
	if ok && id == s.identity && seen > now {
		if _, err := s.write.ExecContext(ctx, "UPDATE db_identity SET id = lower(hex(randomblob(8)))"); err != nil {
			return fmt.Errorf("give the database a new identity: %w", classify(err))
		}
		if err := s.write.QueryRowContext(ctx, "SELECT id FROM db_identity").Scan(&s.identity); err != nil {
			return fmt.Errorf("read the database's identity: %w", classify(err))
		}
		s.cfg.Logger.Warn("the database is behind the changes a server last saw it at: restored from an older copy? It takes a new identity, so that clients following changes from before (WatchJobs resume tokens) start over",
			"db", db, "change", now, "seen", seen)
	}
	s.seen = now
	s.saveWatermark(db)
	return nil
}

// keepWatermark rewrites the watermark every watermarkEvery until stop
// is closed, and once more then.
func (s *Store) keepWatermark(db string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(watermarkEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			s.moveWatermark(db)
			return
		}
		s.moveWatermark(db)
	}
}

// moveWatermark writes the watermark if the change sequence moved on.
func (s *Store) moveWatermark(db string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	now, err := changeSeq(ctx, s.read)
	if err != nil || now <= s.seen {
		return
	}
	s.seen = now
	s.saveWatermark(db)
}

func changeSeq(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT seq FROM changes WHERE id = 1").Scan(&n); err != nil {
		return 0, fmt.Errorf("read the change sequence: %w", classify(err))
	}
	return n, nil
}

// saveWatermark writes s.seen to the watermark file: a new file renamed
// over the old one, readable by the database's owner only.
func (s *Store) saveWatermark(db string) {
	path := watermarkPath(db)
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err == nil {
		_, err = fmt.Fprintf(tmp, "%s %d\n", s.identity, s.seen)
		err = errors.Join(err, tmp.Close())
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil && !s.watermarkFailed {
		s.watermarkFailed = true
		s.cfg.Logger.Warn("cannot write the file that lets serve tell a database restored from an older copy", "file", path, "err", err)
	}
}

// readWatermark reads a watermark file: the identity and the change
// sequence it holds, ok false when it is missing or not one.
func readWatermark(path string) (id string, seq int64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 100 {
		return "", 0, false
	}
	id, n, found := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !found || id == "" {
		return "", 0, false
	}
	seq, err = strconv.ParseInt(n, 10, 64)
	return id, seq, err == nil
}
