package web_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
)

// A server restarted on another database (an empty one, one restored
// from a backup) no longer has the jobs the page shows, and never names
// them as deleted: its stream starts over with the jobs it has. The page
// keeps only those, as a reload would, and the details of a job it no
// longer has say so, without the buttons that would fail on it.
func TestAfterARestartOnAnotherDatabaseThePageShowsOnlyWhatTheServerHas(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	first := testdb.New(t)
	srv := startServer(t, addr, first)
	defer func() {
		if srv != nil {
			srv.shutdown(t)
		}
	}()

	gone := submit(t, ctx, srv.engine, "mail.send", `{"to":"a"}`)
	alsoGone := submit(t, ctx, srv.engine, "mail.send", `{"to":"b"}`)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("both jobs", exists(row(gone.ID))+" && "+exists(row(alsoGone.ID)))
	p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as first loaded"`))
	p.click("open a job's details", row(gone.ID))
	p.waitFor("its details, queued, with Cancel offered", detailShows(gone.ID, "queued")+
		` && !document.querySelector('#detail button[data-action="cancel"]').disabled`)

	srv.shutdown(t)
	srv = nil
	p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
	srv = startServer(t, addr, testdb.New(t))
	fresh := submit(t, ctx, srv.engine, "report.export", `{}`)

	p.waitFor("the new server's job, alone", exists(row(fresh.ID))+" && "+rowCount(1))
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
	p.waitFor("the details saying the server has no such job, without buttons", `(() => {
		const d = document.getElementById("detail");
		return d.dataset.jobId === `+strconv.Quote(gone.ID)+` && d.dataset.state === "deleted" &&
			d.querySelector(".deleted-note").textContent.includes("The server has no such job") &&
			d.querySelector(".detail-body").hidden &&
			d.querySelector('button[data-action="cancel"]').offsetParent === null;
	})()`)
	p.waitFor("one job counted", textHas("#jobs-count", "1 most recent shown"))
	p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)

	// Back on the first database (the operator fixes the --db they got
	// wrong): its jobs were never deleted, so they show again, and one
	// opened by its id shows its details.
	srv.shutdown(t)
	srv = nil
	p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
	srv = startServer(t, addr, first)
	p.waitFor("the first database's jobs again, and not the other's", exists(row(gone.ID))+" && "+exists(row(alsoGone.ID))+" && !"+exists(row(fresh.ID))+" && "+rowCount(2))
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
	p.waitFor("the details of the job shown, queued again", detailShows(gone.ID, "queued"))
	p.do("open the other job by its id", chromedp.Evaluate[chromedp.Void](`(() => {
		document.getElementById("open-job").value = `+strconv.Quote(alsoGone.ID)+`;
		document.getElementById("open-form").requestSubmit();
	})()`))
	p.waitFor("its details, queued, with Cancel offered", detailShows(alsoGone.ID, "queued")+
		` && !document.querySelector('#detail button[data-action="cancel"]').disabled`)
	p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
}

// A server restarted on its database restored from an older copy (a
// backup) has the jobs the page shows, at versions lower than the page
// last saw: the page takes the server's answer for them, in the list and
// in the details, as a reload would, and offers the actions that apply
// to the state the server has. A job deleted since the copy was made is
// the server's again, and shows.
func TestAfterARestoreFromAnOlderCopyThePageShowsTheStatesTheServerHas(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	// A SQLite file, whatever the backend the other tests run on: the
	// operator restores this file from its copy.
	dbPath := filepath.Join(t.TempDir(), "jobwatch.db")
	srv := startServer(t, addr, dbPath)
	defer func() {
		if srv != nil {
			srv.shutdown(t)
		}
	}()

	queued := submit(t, ctx, srv.engine, "mail.send", `{"to":"a"}`)
	failed := submit(t, ctx, srv.engine, "report.export", `{}`)
	claim(t, ctx, srv.engine, "report.export").fail("Timeout", "warehouse did not answer")
	deleted := submit(t, ctx, srv.engine, "mail.send", `{"to":"b"}`)

	backup := backUp(t, ctx, dbPath)

	// After the copy: the queued job cancelled, the failed one retried
	// and run to success, the third cancelled, then deleted while the
	// page watches.
	if _, err := srv.engine.Cancel(ctx, queued.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.engine.Retry(ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	claim(t, ctx, srv.engine, "report.export").complete(`{"rows":3}`)
	if _, err := srv.engine.Cancel(ctx, deleted.ID); err != nil {
		t.Fatal(err)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("the two cancelled jobs and the one that succeeded", exists(row(queued.ID)+`[data-state="cancelled"]`)+" && "+
		exists(row(failed.ID)+`[data-state="succeeded"]`)+" && "+exists(row(deleted.ID)+`[data-state="cancelled"]`))
	p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as first loaded"`))
	if err := srv.engine.Delete(ctx, deleted.ID); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the deleted job's row gone", absent(row(deleted.ID))+" && "+rowCount(2))
	p.click("open the job that succeeded", row(failed.ID))
	p.waitFor("its details, succeeded, with nothing to retry", detailShows(failed.ID, "succeeded")+" && "+
		offered("retry", false)+" && "+hiddenAction("cancel"))

	srv.shutdown(t)
	srv = nil
	p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
	restore(t, backup, dbPath)
	srv = startServer(t, addr, dbPath)

	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
	p.waitFor("the rows as the copy has them", exists(row(queued.ID)+`[data-state="queued"]`)+" && "+
		exists(row(failed.ID)+`[data-state="failed"]`)+" && "+exists(row(deleted.ID)+`[data-state="queued"]`)+" && "+rowCount(3))
	p.waitFor("the details of the job shown, failed, with Retry offered", detailShows(failed.ID, "failed")+" && "+
		offered("retry", true)+" && "+hiddenAction("cancel")+" && "+textHas("#detail .error-box", "warehouse did not answer"))

	p.click("open the job the copy has queued", row(queued.ID))
	p.waitFor("its details, queued, with Cancel offered and no Retry", detailShows(queued.ID, "queued")+" && "+
		offered("cancel", true)+" && "+hiddenAction("retry"))
	p.click("open the job deleted since the copy", row(deleted.ID))
	p.waitFor("its details, queued, with Cancel offered", detailShows(deleted.ID, "queued")+" && "+offered("cancel", true))

	// The buttons act on the server's state: Retry of the failed job
	// answers that it is queued again.
	p.click("open the failed job again", row(failed.ID))
	p.click("ask to retry it", `#detail button[data-action="retry"]`)
	p.click("say yes", "#detail .confirm-yes")
	p.waitFor("what it did", textHas("#detail .outcome", "Retried: job "+failed.ID+" is queued again"))
	p.waitFor("its row, queued", exists(row(failed.ID)+`[data-state="queued"]`))
	p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
}

// offered is a JS condition: the details show the action's button, and
// enabled (or disabled, with its reason).
func offered(action string, enabled bool) string {
	return fmt.Sprintf(`(() => {
		const b = document.querySelector('#detail button[data-action=%q]');
		return b !== null && b.offsetParent !== null && b.disabled === %t;
	})()`, action, !enabled)
}

// hiddenAction is a JS condition: the details do not show the action's
// button.
func hiddenAction(action string) string {
	return fmt.Sprintf(`document.querySelector('#detail button[data-action=%q]')?.offsetParent === null`, action)
}

// backUp copies the SQLite file dbPath, which a server has open, as
// docs/OPERATING.md backs one up (VACUUM INTO), and returns the copy's
// path.
func backUp(t *testing.T, ctx context.Context, dbPath string) string {
	t.Helper()
	backup := filepath.Join(t.TempDir(), "backup.db")
	db, err := sql.Open("sqlite3", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", backup); err != nil {
		t.Fatalf("back up: %v", err)
	}
	return backup
}

// restore puts the copy backup in the place of the SQLite file dbPath,
// whose server has stopped: the file and its WAL go, the copy takes its
// name.
func restore(t *testing.T, backup, dbPath string) {
	t.Helper()
	for _, f := range []string{dbPath, dbPath + "-wal", dbPath + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if err := os.Rename(backup, dbPath); err != nil {
		t.Fatal(err)
	}
}
