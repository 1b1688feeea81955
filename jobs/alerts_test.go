package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func queueStat(t *testing.T, e *jobs.Engine, name string) jobs.QueueStats {
	t.Helper()
	stats, err := e.QueueStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stats {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("queue %s not listed in %+v", name, stats)
	return jobs.QueueStats{}
}

func sweep(t *testing.T, e *jobs.Engine) {
	t.Helper()
	if err := e.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestAQueueAlertsWhenItsWorkHasNotDrainedForAlertAfterAndStopsWhenItDrains(t *testing.T) {
	clock := newFakeClock()
	logs := &lockedBuffer{}
	st := openStore(t)
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: 5 * time.Minute}, "quiet": {}}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Declared queues are listed while idle; an idle watched queue is
	// drained now.
	sweep(t, e)
	drainedAt := clock.Now()
	if q := queueStat(t, e, "index"); q.Alerting || !q.LastDrainedAt.Equal(drainedAt) || q.AlertAfter != 5*time.Minute {
		t.Fatalf("idle index: %+v; want drained now, not alerting", q)
	}

	// Jobs keep coming and going, but the queue never empties.
	clock.Advance(time.Minute)
	first := running(t, e, jobs.SubmitRequest{Queue: "index"})
	for range 4 {
		clock.Advance(time.Minute)
		submit(t, e, jobs.SubmitRequest{Queue: "index", Kind: "next"})
		sweep(t, e)
	}
	// 5 minutes after the last drain: not yet longer than alert_after.
	if q := queueStat(t, e, "index"); q.Alerting || !q.LastDrainedAt.Equal(drainedAt) {
		t.Fatalf("5m after draining: %+v; want last drained at %v, not alerting", q, drainedAt)
	}
	if _, err := e.Complete(ctx, first.ID, first.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	sweep(t, e)
	q := queueStat(t, e, "index")
	if !q.Alerting || !q.LastDrainedAt.Equal(drainedAt) || q.Queued != 4 {
		t.Fatalf("5m1s after draining, 4 queued: %+v; want alerting", q)
	}
	sweep(t, e)
	if n := logs.count("queue alerting"); n != 1 || logs.count("last_drained_at=") != 1 {
		t.Errorf("logged entering %d times over two sweeps:\n%s\nwant once, with when it last drained", n, logs.buf.String())
	}
	// A queue without alert_after never alerts, however long it waits.
	submit(t, e, jobs.SubmitRequest{Queue: "quiet"})
	clock.Advance(time.Hour)
	if q := queueStat(t, e, "quiet"); q.Alerting || !q.LastDrainedAt.IsZero() {
		t.Errorf("queue without alert_after: %+v; want never alerting", q)
	}

	// Drain it: the alert ends, logged once.
	for {
		j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Queues: []string{"index"}}, time.Now())
		if err != nil {
			break
		}
		if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	sweep(t, e)
	sweep(t, e)
	if q := queueStat(t, e, "index"); q.Alerting || !q.LastDrainedAt.Equal(clock.Now()) {
		t.Fatalf("after draining: %+v; want drained now, not alerting", q)
	}
	if n := logs.count("queue no longer alerting"); n != 1 {
		t.Errorf("logged leaving %d times, want once:\n%s", n, logs.buf.String())
	}

	// When it drained outlives the engine: a new engine over the same
	// store alerts on time without having seen the drain itself.
	drainedAt = clock.Now()
	submit(t, e, jobs.SubmitRequest{Queue: "index"})
	e.Shutdown()
	clock.Advance(6 * time.Minute)
	restarted := newEngineOver(t, st, jobs.Config{Now: clock.Now, Rules: e.Rules()})
	if q := queueStat(t, restarted, "index"); !q.Alerting || !q.LastDrainedAt.Equal(drainedAt) {
		t.Errorf("after a restart, 6m since the drain: %+v; want alerting, last drained at %v", q, drainedAt)
	}
}

func TestAWatchedQueueNeverSeenDrainedCountsFromWhenTheEngineFirstWatchedIt(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	// Busy for a day before anyone watched it.
	submit(t, e, jobs.SubmitRequest{Queue: "backlog"})
	clock.Advance(24 * time.Hour)
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"backlog": {AlertAfter: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	if q := queueStat(t, e, "backlog"); q.Alerting || !q.LastDrainedAt.IsZero() {
		t.Fatalf("just watched: %+v; want not alerting yet, never drained", q)
	}
	clock.Advance(time.Minute + time.Second)
	if q := queueStat(t, e, "backlog"); !q.Alerting || !q.LastDrainedAt.IsZero() {
		t.Fatalf("watched for 61s, never drained: %+v; want alerting", q)
	}
}

func TestTheWebhookReceivesEnteringAndLeavingRetriedPastAFailure(t *testing.T) {
	type received struct {
		Queue         string     `json:"queue"`
		Alerting      bool       `json:"alerting"`
		LastDrainedAt *time.Time `json:"last_drained_at"`
		AlertAfter    string     `json:"alert_after"`
		Queued        int64      `json:"queued"`
	}
	events := make(chan received, 10)
	var calls atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first POST fails: the hook must try again.
		if calls.Add(1) == 1 {
			http.Error(w, "not now", http.StatusServiceUnavailable)
			return
		}
		var ev received
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&ev) != nil {
			t.Errorf("webhook got %s %s, want a JSON POST", r.Method, r.Header.Get("Content-Type"))
		}
		events <- ev
	}))
	defer hook.Close()
	next := func() received {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no webhook POST")
			return received{}
		}
	}

	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour})
	if err := e.SetRules(jobtype.Rules{AlertWebhook: hook.URL + "/hooks/jobwatch",
		Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	drainedAt := clock.Now()
	j := running(t, e, jobs.SubmitRequest{Queue: "index"})
	clock.Advance(2 * time.Minute)
	sweep(t, e)
	sweep(t, e) // still alerting: no second POST

	ev := next()
	if ev.Queue != "index" || !ev.Alerting || ev.LastDrainedAt == nil || !ev.LastDrainedAt.Equal(drainedAt) || ev.AlertAfter != "1m0s" {
		t.Fatalf("entering: %+v; want index alerting, last drained at %v, alert_after 1m0s", ev, drainedAt)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("POSTs so far: %d, want 2 (one refused, one delivered)", n)
	}

	if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	if ev := next(); ev.Queue != "index" || ev.Alerting {
		t.Fatalf("leaving: %+v; want index not alerting", ev)
	}
	select {
	case ev := <-events:
		t.Errorf("an extra POST: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestAReloadWithoutAlertAfterEndsTheAlertOnce(t *testing.T) {
	clock := newFakeClock()
	logs := &lockedBuffer{}
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	submit(t, e, jobs.SubmitRequest{Queue: "index"})
	sweep(t, e)
	clock.Advance(2 * time.Minute)
	sweep(t, e)
	if q := queueStat(t, e, "index"); !q.Alerting {
		t.Fatalf("%+v, want alerting", q)
	}
	// Never seen drained: the log line says nothing of when, as the
	// webhook's body does not (not the zero time).
	if logs.count("queue alerting") != 1 || logs.count("last_drained_at") != 0 {
		t.Errorf("a queue never drained logged:\n%s\nwant one line entering, without last_drained_at", logs.buf.String())
	}
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {}}}); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	sweep(t, e)
	if q := queueStat(t, e, "index"); q.Alerting {
		t.Errorf("%+v after the reload, want not alerting", q)
	}
	if n := logs.count("queue no longer alerting"); n != 1 {
		t.Errorf("logged leaving %d times, want once", n)
	}
}

// drainCountingStore counts the MarkDrained writes, and the QueueStats
// and BusyQueues reads, that reach the store.
type drainCountingStore struct {
	store.Store
	marks, statReads, busyReads atomic.Int64
}

func (s *drainCountingStore) BusyQueues(ctx context.Context, queues []string) ([]string, error) {
	s.busyReads.Add(1)
	return s.Store.BusyQueues(ctx, queues)
}

// looks counts the sweeps' looks at the queues: their stats or which are
// busy.
func (s *drainCountingStore) looks() int64 { return s.statReads.Load() + s.busyReads.Load() }

func (s *drainCountingStore) MarkDrained(ctx context.Context, queues []string, t time.Time) error {
	s.marks.Add(1)
	return s.Store.MarkDrained(ctx, queues, t)
}

func (s *drainCountingStore) QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error) {
	s.statReads.Add(1)
	return s.Store.QueueStats(ctx, now)
}

// Between depth samples the sweep asks only which watched queues are
// busy; a queue that starts or stops alerting at such a sweep is still
// announced with its counts, read for it then.
func TestAnAlertBetweenDepthSamplesCarriesTheQueuesCounts(t *testing.T) {
	clock := newFakeClock()
	st := &drainCountingStore{Store: openStore(t)}
	sender := &sentAlerts{}
	rules := jobtype.Rules{AlertWebhook: "http://hook.invalid/", Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour, Rules: rules,
		DepthInterval: time.Hour, Alerts: sender})
	sweep(t, e) // the hour's depth sample
	j := running(t, e, jobs.SubmitRequest{Queue: "index"})
	submit(t, e, jobs.SubmitRequest{Queue: "index"})
	submit(t, e, jobs.SubmitRequest{Queue: "index"})
	for range 3 {
		clock.Advance(30 * time.Second)
		sweep(t, e)
	}
	_, got := sender.sent()
	if len(got) != 1 || got[0].Queue != "index" || !got[0].Alerting || got[0].Queued != 2 || got[0].Running != 1 {
		t.Fatalf("sent %+v; want index starting to alert with 2 queued and 1 running", got)
	}
	if n := st.statReads.Load(); n != 2 {
		t.Errorf("%d queue stats reads, want 2: the depth sample and the alert's counts", n)
	}

	// The queue drains: the alert ends at the next sweep, read for its
	// counts too.
	if _, err := e.Complete(t.Context(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range queuedIDs(t, e, "index") {
		if _, err := e.Cancel(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second)
	sweep(t, e)
	if _, got = sender.sent(); len(got) != 2 || got[1].Alerting || got[1].Queued != 0 || got[1].Running != 0 {
		t.Errorf("sent %+v; want the alert to end with the queue empty", got)
	}
	if n := st.statReads.Load(); n != 3 {
		t.Errorf("%d queue stats reads, want 3", n)
	}
}

// queuedIDs are the ids of queue's QUEUED jobs.
func queuedIDs(t *testing.T, e *jobs.Engine, queue string) []string {
	t.Helper()
	list, _, err := e.List(t.Context(), jobs.ListRequest{Queue: queue, States: []jobtype.State{jobtype.Queued}, Limit: jobs.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range list {
		ids = append(ids, j.ID)
	}
	return ids
}

func TestAnIdleServerWithAlertQueuesDoesNotWriteEverySweep(t *testing.T) {
	clock := newFakeClock()
	st := &drainCountingStore{Store: openStore(t)}
	rules := jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"index":  {AlertAfter: 5 * time.Minute}, // refreshed every 30s while idle
		"deploy": {AlertAfter: time.Hour},
	}}
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour, Rules: rules})

	// Two minutes idle, a sweep a second: the first sweep records both
	// queues, then one write every 30s (a tenth of index's alert_after).
	for i := range 120 {
		if i > 0 {
			clock.Advance(time.Second)
		}
		sweep(t, e)
	}
	if n := st.marks.Load(); n != 4 {
		t.Errorf("%d drain writes over 120 idle sweeps, want 4 (at 0s, 30s, 60s and 90s)", n)
	}
	lastIdle := clock.Now() // 119s: not written yet

	// Work arrives: what users see is exact at once, and the first sweep
	// that sees it busy writes the last idle sighting, once.
	clock.Advance(time.Second)
	submit(t, e, jobs.SubmitRequest{Queue: "index"})
	if q := queueStat(t, e, "index"); !q.LastDrainedAt.Equal(lastIdle) {
		t.Errorf("busy before a sweep: last drained %v, want the last idle sweep %v", q.LastDrainedAt, lastIdle)
	}
	before := st.marks.Load()
	for range 10 {
		clock.Advance(time.Second)
		sweep(t, e)
	}
	if n := st.marks.Load() - before; n != 1 {
		t.Errorf("%d drain writes over 10 busy sweeps, want 1", n)
	}
	// The store has it: a restarted engine shows the same drain, and
	// alerts 5 minutes after it.
	restarted := newEngineOver(t, st, jobs.Config{Now: clock.Now, Rules: rules})
	if q := queueStat(t, restarted, "index"); !q.LastDrainedAt.Equal(lastIdle) || q.Alerting {
		t.Errorf("after a restart: %+v; want last drained at %v, not alerting", q, lastIdle)
	}
	clock.Advance(5*time.Minute - 10*time.Second)
	q := queueStat(t, restarted, "index")
	if !q.Alerting || !q.AlertingSince.Equal(lastIdle.Add(5*time.Minute)) {
		t.Errorf("5m1s after the drain: %+v; want alerting since %v", q, lastIdle.Add(5*time.Minute))
	}
}

func TestTwoReplicasSharingAnIdleStoreWriteAsLittleAsOne(t *testing.T) {
	clock := newFakeClock()
	st := &drainCountingStore{Store: openStore(t)}
	rules := jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: 5 * time.Minute}}}
	a := newEngineOver(t, st, jobs.Config{Now: clock.Now, Rules: rules})
	b := newEngineOver(t, st, jobs.Config{Now: clock.Now, Rules: rules})
	for i := range 60 {
		if i > 0 {
			clock.Advance(time.Second)
		}
		sweep(t, a)
		sweep(t, b)
	}
	// a writes at 0s and 30s; b finds those fresh each time.
	if n := st.marks.Load(); n != 2 {
		t.Errorf("%d drain writes by two replicas over a minute idle, want 2", n)
	}
	lastIdle := clock.Now()
	clock.Advance(time.Second)
	submit(t, a, jobs.SubmitRequest{Queue: "index"})
	before := st.marks.Load()
	sweep(t, a)
	sweep(t, b)
	if n := st.marks.Load() - before; n != 1 {
		t.Errorf("%d drain writes when the queue filled, want 1: b finds a's", n)
	}
	for _, e := range []*jobs.Engine{a, b} {
		if q := queueStat(t, e, "index"); !q.LastDrainedAt.Equal(lastIdle) {
			t.Errorf("last drained %v, want %v on both replicas", q.LastDrainedAt, lastIdle)
		}
	}
}

func TestRunRecordsTheLastDrainItSawAsItStops(t *testing.T) {
	clock := newFakeClock()
	st := &drainCountingStore{Store: openStore(t)}
	rules := jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Hour}}}
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, Rules: rules, SweepInterval: 5 * time.Millisecond})
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the first sweep's write", func() bool { return st.marks.Load() == 1 })
	clock.Advance(30 * time.Second) // idle still: nothing to write before a minute (an hour's alert_after)
	looks := st.looks()
	waitFor("a sweep at the new time", func() bool { return st.looks() > looks+1 })
	lastIdle := clock.Now()
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if n := st.marks.Load(); n != 2 {
		t.Errorf("%d drain writes, want 2: the first sweep's and the one as Run ended", n)
	}

	clock.Advance(time.Minute)
	restarted := newEngineOver(t, st, jobs.Config{Now: clock.Now, Rules: rules})
	submit(t, restarted, jobs.SubmitRequest{Queue: "index"})
	if q := queueStat(t, restarted, "index"); !q.LastDrainedAt.Equal(lastIdle) {
		t.Errorf("after a stop and a restart: last drained %v, want the last idle sweep %v", q.LastDrainedAt, lastIdle)
	}
}

// Three replicas sweeping one store each see a queue start and stop
// alerting; the webhook hears each once, and a replica that starts in
// the middle of the episode does not announce it again.
func TestThreeReplicasAnnounceEachAlertEpisodeOnce(t *testing.T) {
	type received struct {
		Queue    string `json:"queue"`
		Alerting bool   `json:"alerting"`
	}
	events := make(chan received, 20)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev received
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		events <- ev
	}))
	defer hook.Close()

	clock := newFakeClock()
	sa, sb := openSharedStores(t)
	rules := jobtype.Rules{AlertWebhook: hook.URL, Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}
	cfg := jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour, Rules: rules}
	replicas := []*jobs.Engine{newEngineOver(t, sa, cfg), newEngineOver(t, sb, cfg), newEngineOver(t, sa, cfg)}
	sweepAll := func() {
		for _, e := range replicas {
			sweep(t, e)
		}
	}
	sweepAll()
	j := running(t, replicas[0], jobs.SubmitRequest{Queue: "index"})
	clock.Advance(2 * time.Minute)
	sweepAll()
	sweepAll()
	late := newEngineOver(t, sb, cfg) // a replica started during the episode
	replicas = append(replicas, late)
	sweepAll()
	if _, err := replicas[1].Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	sweepAll()
	sweepAll()

	var got []received
	for {
		select {
		case ev := <-events:
			got = append(got, ev)
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	want := []received{{"index", true}, {"index", false}}
	if !slices.Equal(got, want) {
		t.Errorf("webhook heard %+v, want %+v: one start and one end", got, want)
	}
}

// Replicas share the store, and each sees a queue start and stop
// alerting in its own sweep: the one whose record changed it logs it,
// so the cluster's log says each once, as the webhook hears it once.
func TestAnAlertIsLoggedOnceAcrossEnginesSharingAStore(t *testing.T) {
	clock := newFakeClock()
	st := openStore(t)
	var logs [2]*lockedBuffer
	var es [2]*jobs.Engine
	for i := range es {
		logs[i] = &lockedBuffer{}
		es[i] = newEngineOver(t, st, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour,
			Logger: slog.New(slog.NewTextHandler(logs[i], nil))})
		if err := es[i].SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(what string) int { return logs[0].count(what) + logs[1].count(what) }
	for _, e := range es {
		sweep(t, e)
	}
	j := running(t, es[0], jobs.SubmitRequest{Queue: "index"})
	clock.Advance(2 * time.Minute)
	for _, e := range es {
		sweep(t, e)
		sweep(t, e)
	}
	if q := queueStat(t, es[1], "index"); !q.Alerting {
		t.Fatalf("2m with a job running and alert_after 1m: %+v; want alerting", q)
	}
	if n := count("queue alerting"); n != 1 {
		t.Errorf("two engines logged entering %d times, want once:\n%s\n%s", n, logs[0].buf.String(), logs[1].buf.String())
	}
	if _, err := es[0].Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		sweep(t, e)
		sweep(t, e)
	}
	if n := count("queue no longer alerting"); n != 1 {
		t.Errorf("two engines logged leaving %d times, want once:\n%s\n%s", n, logs[0].buf.String(), logs[1].buf.String())
	}
}
