// Package heldstore is a store.Store for tests of what waits in front of
// a store: its creates of jobs wait for the test's word, tenant by
// tenant, and it records whose creates reached it, in order.
package heldstore

import (
	"context"
	"slices"
	"sync"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Creates wraps a store: each CreateJob and CreateJobs waits for
// Release of its (first) job's tenant, or its context's end.
type Creates struct {
	store.Store

	mu      sync.Mutex
	entered []string                 // the tenant of each create, in order
	gates   map[string]chan struct{} // by tenant
}

// New returns st with its creates held.
func New(st store.Store) *Creates { return &Creates{Store: st} }

func (s *Creates) gate(tenant string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gates == nil {
		s.gates = map[string]chan struct{}{}
	}
	if s.gates[tenant] == nil {
		s.gates[tenant] = make(chan struct{})
	}
	return s.gates[tenant]
}

// Release lets one create of tenant's through, once one waits.
func (s *Creates) Release(tenant string) { s.gate(tenant) <- struct{}{} }

// Order is the tenant of each create that reached the store, in order.
func (s *Creates) Order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entered)
}

func (s *Creates) enter(ctx context.Context, tenant string) error {
	s.mu.Lock()
	s.entered = append(s.entered, tenant)
	s.mu.Unlock()
	select {
	case <-s.gate(tenant):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Creates) CreateJob(ctx context.Context, j jobtype.Job) (jobtype.Job, error) {
	if err := s.enter(ctx, j.Tenant); err != nil {
		return jobtype.Job{}, err
	}
	return s.Store.CreateJob(ctx, j)
}

func (s *Creates) CreateJobs(ctx context.Context, js []jobtype.Job) ([]jobtype.Job, error) {
	if err := s.enter(ctx, js[0].Tenant); err != nil {
		return nil, err
	}
	return s.Store.CreateJobs(ctx, js)
}
