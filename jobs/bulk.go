package jobs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Bulk actions (RetryJobs, CancelJobs, DeleteJobs) act on the jobs a
// filter matches one page at a time, so that no call holds the store for
// long: a page lists at most MaxBulkPage matching jobs, newest first, as
// ListJobs does, and acts on each with the single-job action (Retry,
// Cancel, Delete), a few at a time so that their writes share commits.
// Paging is by creation key, so a job the action moved out of the filter
// (a retried job is no longer FAILED) never shifts the next page.

// MaxBulkPage is the most jobs one bulk call looks at, and its default.
const MaxBulkPage = 1000

// bulkParallel is how many single-job actions of a page run at once.
const bulkParallel = 8

// BulkFilter selects the jobs of a bulk action. Empty lists do not
// filter; at least one of Queues, Kinds, States, CreatedBefore and Batch
// must be set unless All is, so that no call acts on every job by a slip.
type BulkFilter struct {
	// Tenant is the tenant whose jobs are acted on; AllTenants acts on
	// every tenant's. "" means jobtype.DefaultTenant.
	Tenant        string
	Queues, Kinds []string
	// States narrows the states the action applies to; a state it does
	// not apply to is refused.
	States        []jobtype.State
	CreatedBefore time.Time
	// Batch keeps the jobs of that batch; "": every job.
	Batch string
	All   bool
}

// AllTenants is the BulkFilter.Tenant of a bulk action on every tenant.
const AllTenants = "*"

// BulkAction is one of the bulk actions: its name, the states it applies
// to, and the single-job action on a job as the page listed it, which
// reports whether it changed the job.
type BulkAction struct {
	Name   string
	Done   string // what the action did to a job: "retried"
	States []jobtype.State
	Act    func(ctx context.Context, listed jobtype.Job) (changed bool, err error)
}

// BulkResult is what one page of a bulk action did.
type BulkResult struct {
	Matched, Changed int
	// NextPageToken is "" once no matching job is left to look at.
	NextPageToken string
}

// Bulk runs a on one page of the jobs f matches: the page after
// pageToken, of pageSize jobs (0 or more than MaxBulkPage: MaxBulkPage).
// A job that no longer takes the action when its turn comes (another
// caller ended or removed it meanwhile) counts as matched, not changed.
// A job its tenant's quota refuses (jobtype.QuotaError) is left as it
// is, and so are that tenant's later jobs of the page; the page goes on
// with the other tenants' and then returns a *BulkHeldError, with the
// next page's token in the result: the held jobs still match, so the
// same page again would find them first, and a caller acting on every
// tenant's jobs goes on past them with it. Any other error stops the
// page and is returned, with what the page did before it in the result
// (Matched is then 0 if the page was never read). Running the same page
// again is safe either way, since the jobs acted on no longer match.
func (e *Engine) Bulk(ctx context.Context, a BulkAction, f BulkFilter, pageToken string, pageSize int) (BulkResult, error) {
	lf, err := bulkListFilter(a, f)
	if err != nil {
		return BulkResult{}, err
	}
	if err := jobtype.CheckLen("page_token", pageToken, jobtype.MaxTokenBytes); err != nil {
		return BulkResult{}, err
	}
	if pageSize < 0 {
		return BulkResult{}, &jobtype.InvalidError{Field: "page_size", Reason: "must not be negative"}
	}
	if pageSize == 0 || pageSize > MaxBulkPage {
		pageSize = MaxBulkPage
	}
	key := bulkKey(a, lf)
	if pageToken != "" {
		given, rest, ok := strings.Cut(pageToken, ".")
		if !ok || given != key {
			return BulkResult{}, &jobtype.InvalidError{Field: "page_token",
				Reason: "is not one this call's action and filter gave: follow a token with the call it came from, or start again without one"}
		}
		pageToken = rest
	}
	lf.Limit, lf.PageToken = pageSize, pageToken
	page, next, err := e.store.ListJobs(ctx, lf)
	if err != nil {
		return BulkResult{}, wrap(a.Name, "", err)
	}
	release, err := e.writeTurn(ctx, len(page))
	if err != nil {
		return BulkResult{Matched: len(page)}, wrap(a.Name, "", err)
	}
	changed, err := e.actOnPage(context.WithValue(ctx, inBulkKey{}, true), a, page)
	release()
	if next != "" {
		next = key + "." + next
	}
	if held := (*BulkHeldError)(nil); err != nil && !errors.As(err, &held) {
		return BulkResult{Matched: len(page), Changed: changed}, err
	}
	return BulkResult{Matched: len(page), Changed: changed, NextPageToken: next}, err
}

// bulkKey names a's action under lf, the filter as read (tenant
// resolved): a bulk page token starts with it, so that a token followed
// with another filter, action or tenant, which would skip jobs of that
// one unseen, is refused instead.
func bulkKey(a BulkAction, lf store.ListFilter) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%q\x00%q\x00%q\x00%d\x00%s", a.Name, lf.Tenant, lf.Queues, lf.Kinds, lf.States, lf.CreatedBefore.UnixNano(), lf.Batch)
	return strconv.FormatUint(h.Sum64(), 36)
}

// BulkHeldError is what a bulk page that tenants' quotas held back
// returns once it has acted on the other tenants' jobs: the first
// refusal, and the tenants refused, in the order they were.
type BulkHeldError struct {
	Err     *jobtype.QuotaError
	Tenants []string
}

func (e *BulkHeldError) Error() string { return e.Err.Error() }
func (e *BulkHeldError) Unwrap() error { return e.Err }

// actOnPage runs a on every job of page, bulkParallel at a time, and
// counts those it changed. A quota's refusal holds back its tenant's
// jobs (BulkHeldError); it stops at the first other error that is not
// the job having moved on.
func (e *Engine) actOnPage(ctx context.Context, a BulkAction, page []jobtype.Job) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		changed int
		held    *BulkHeldError // guarded by mu
		wg      sync.WaitGroup
		listed  = make(chan jobtype.Job)
	)
	heldBack := func(tenant string) bool {
		mu.Lock()
		defer mu.Unlock()
		return held != nil && slices.Contains(held.Tenants, tenant)
	}
	for range min(bulkParallel, len(page)) {
		wg.Go(func() {
			for j := range listed {
				if heldBack(j.Tenant) {
					continue
				}
				ok, err := a.Act(ctx, j)
				var (
					se *StateError
					qe *jobtype.QuotaError
				)
				switch {
				case err == nil:
				case errors.As(err, &se), errors.Is(err, jobtype.ErrNotFound), isConflict(err):
					ok = false // moved on since the page was read
				case errors.As(err, &qe):
					mu.Lock()
					if held == nil {
						held = &BulkHeldError{Err: qe}
					}
					if !slices.Contains(held.Tenants, j.Tenant) {
						held.Tenants = append(held.Tenants, j.Tenant)
					}
					mu.Unlock()
					continue
				default:
					cancel(err)
					continue
				}
				if ok {
					mu.Lock()
					changed++
					mu.Unlock()
				}
			}
		})
	}
feed:
	for _, j := range page {
		select {
		case listed <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(listed)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return changed, err
	}
	if err := ctx.Err(); err != nil {
		return changed, err
	}
	if held != nil {
		return changed, held
	}
	return changed, nil
}

func isConflict(err error) bool {
	var ce *jobtype.ConflictError
	return errors.As(err, &ce)
}

// bulkListFilter is the list a's page reads under f: f's fields, with the
// states narrowed to those a applies to.
func bulkListFilter(a BulkAction, f BulkFilter) (store.ListFilter, error) {
	if !f.All && len(f.Queues) == 0 && len(f.Kinds) == 0 && len(f.States) == 0 && f.CreatedBefore.IsZero() && f.Batch == "" {
		return store.ListFilter{}, &jobtype.InvalidError{Field: "filter",
			Reason: "names no queues, kinds, states, created_before or batch: set one of them, or all to " + a.Name + " every job"}
	}
	if err := validOptionalName("filter.batch", f.Batch); err != nil {
		return store.ListFilter{}, err
	}
	tenant := f.Tenant
	switch tenant {
	case AllTenants:
		tenant = ""
	case "":
		tenant = jobtype.DefaultTenant
	default:
		if err := validOptionalName("filter.tenant", tenant); err != nil {
			return store.ListFilter{}, err
		}
	}
	if err := validNames("filter.queues", f.Queues); err != nil {
		return store.ListFilter{}, err
	}
	if err := validNames("filter.kinds", f.Kinds); err != nil {
		return store.ListFilter{}, err
	}
	states := a.States
	if len(f.States) > 0 {
		if len(f.States) > jobtype.MaxFilterItems {
			return store.ListFilter{}, &jobtype.InvalidError{Field: "filter.states", Reason: "must list at most " +
				strconv.Itoa(jobtype.MaxFilterItems) + " entries, got " + strconv.Itoa(len(f.States))}
		}
		for i, st := range f.States {
			if !slices.Contains(a.States, st) {
				return store.ListFilter{}, &jobtype.InvalidError{Field: "filter.states[" + strconv.Itoa(i) + "]",
					Reason: a.Name + " applies to " + stateList(a.States) + " jobs, not " + strings.ToUpper(string(st))}
			}
		}
		states = f.States
	}
	return store.ListFilter{Tenant: tenant, Queues: f.Queues, Kinds: f.Kinds, States: states,
		CreatedBefore: f.CreatedBefore, Batch: f.Batch}, nil
}

// stateList names states as a person would: "FAILED, CANCELLED or LOST".
func stateList(states []jobtype.State) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = strings.ToUpper(string(s))
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// CancelAction is the bulk action of CancelJobs: Cancel of each job, as
// by (see Cancel).
func (e *Engine) CancelAction() BulkAction {
	return BulkAction{
		Name:   "cancel",
		Done:   "cancelled",
		States: jobtype.ActiveStates,
		Act: func(ctx context.Context, listed jobtype.Job) (bool, error) {
			_, changed, err := e.cancel(ctx, listed.ID)
			return changed, err
		},
	}
}

// RetryAction is the bulk action of RetryJobs: Retry of each job.
func (e *Engine) RetryAction() BulkAction {
	return BulkAction{
		Name:   "retry",
		Done:   "retried",
		States: []jobtype.State{jobtype.Failed, jobtype.Cancelled, jobtype.Lost},
		Act: func(ctx context.Context, listed jobtype.Job) (bool, error) {
			j, err := e.Retry(ctx, listed.ID)
			return err == nil && j.Version > listed.Version, err
		},
	}
}

// DeleteAction is the bulk action of DeleteJobs: Delete of each job.
func (e *Engine) DeleteAction() BulkAction {
	return BulkAction{
		Name:   "delete",
		Done:   "deleted",
		States: []jobtype.State{jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost},
		Act: func(ctx context.Context, listed jobtype.Job) (bool, error) {
			err := e.Delete(ctx, listed.ID)
			return err == nil, err
		},
	}
}
