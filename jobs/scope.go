package jobs

import (
	"context"
	"fmt"
	"slices"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Scope is what a caller may reach by a job's id: the jobs of Tenants
// and of Kinds, each all when empty. A job outside it is ErrNotFound,
// exactly as one that does not exist: whether it exists is none of the
// caller's business.
//
// The check reads the job's tenant and kind alone (store.JobRead with
// Summary, and the tenant in the statement's WHERE when there is one),
// never its payload or result, so the answer costs the same for another
// tenant's job of 256 KiB as for an id that does not exist.
type Scope struct {
	Tenants []string
	Kinds   []string
}

// unbounded reports whether the scope reaches every job.
func (s Scope) unbounded() bool { return len(s.Tenants) == 0 && len(s.Kinds) == 0 }

// reaches reports whether j is in the scope.
func (s Scope) reaches(j *jobtype.Job) bool {
	return (len(s.Tenants) == 0 || slices.Contains(s.Tenants, j.Tenant)) &&
		(len(s.Kinds) == 0 || slices.Contains(s.Kinds, j.Kind))
}

// CheckScope returns nil if job id exists and is in sc, and ErrNotFound
// (wrapped, as for a job that does not exist) if not. A job's tenant and
// kind never change, so the answer holds for the call that follows.
func (e *Engine) CheckScope(ctx context.Context, id string, sc Scope) error {
	if err := validID("job_id", id); err != nil {
		return err
	}
	if sc.unbounded() {
		return nil
	}
	r := store.JobRead{Summary: true}
	if len(sc.Tenants) == 1 {
		r.Tenant = sc.Tenants[0]
	}
	j, err := e.store.ReadJob(ctx, id, r)
	if err == nil && !sc.reaches(&j) {
		err = fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound) // as the store words a missing one
	}
	if err != nil {
		return wrap("get", id, err)
	}
	return nil
}

// GetIn is Get for a caller confined to tenant ("": any tenant): another
// tenant's job is ErrNotFound, as one that does not exist, and is not
// read (the tenant is in the read's WHERE), in one read for a job of the
// caller's own.
func (e *Engine) GetIn(ctx context.Context, tenant, id string) (jobtype.Job, error) {
	if err := validID("job_id", id); err != nil {
		return jobtype.Job{}, err
	}
	j, err := e.store.ReadJob(ctx, id, store.JobRead{Tenant: tenant})
	if err != nil {
		return jobtype.Job{}, wrap("get", id, err)
	}
	return j, nil
}

// TenantOf returns the tenant of job id, reading nothing else of it.
func (e *Engine) TenantOf(ctx context.Context, id string) (string, error) {
	if err := validID("job_id", id); err != nil {
		return "", err
	}
	j, err := e.store.ReadJob(ctx, id, store.JobRead{Summary: true})
	if err != nil {
		return "", wrap("get", id, err)
	}
	return j.Tenant, nil
}
