package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestTheSendBudget(t *testing.T) {
	ctx := context.Background()
	t.Run("a call over the budget waits its turn and is let in when room is given back", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		if took, err := b.admit(ctx, nil, 80); err != nil || took != 80 {
			t.Fatalf("admit 80 = %d, %v", took, err)
		}
		admitted := make(chan int64)
		go func() {
			took, _ := b.admit(ctx, nil, 50)
			admitted <- took
		}()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		select {
		case <-admitted:
			t.Fatal("admitted past the budget")
		default:
		}
		b.give(nil, 80)
		if took := <-admitted; took != 50 {
			t.Fatalf("took %d, want 50", took)
		}
	})
	t.Run("first come first served: a small call does not pass a large one waiting", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		b.admit(ctx, nil, 60)
		order := make(chan int64, 2)
		go func() { took, _ := b.admit(ctx, nil, 95); order <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		// 10 would fit beside the 60 held, but the 95 came first.
		go func() { took, _ := b.admit(ctx, nil, 10); order <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 2 })
		select {
		case took := <-order:
			t.Fatalf("%d went in before the 95 that waited first", took)
		case <-time.After(20 * time.Millisecond):
		}
		b.give(nil, 60)
		if first := <-order; first != 95 {
			t.Fatalf("%d went first, want the 95 that waited first", first)
		}
		b.give(nil, 95)
		if second := <-order; second != 10 {
			t.Fatalf("then %d, want 10", second)
		}
	})
	t.Run("an answer larger than the budget takes all of it, alone", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		if took, err := b.admit(ctx, nil, 1000); err != nil || took != 100 {
			t.Fatalf("admit 1000 = %d, %v, want 100", took, err)
		}
	})
	t.Run("a call is refused when nothing has been sent for the stall", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: 50 * time.Millisecond}
		b.admit(ctx, nil, 100)
		_, err := b.admit(ctx, nil, 10)
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("err = %v, want resource_exhausted", err)
		}
		if b.waiting.Len() != 0 || b.held != 100 {
			t.Fatalf("a refused call left %d waiting, %d held", b.waiting.Len(), b.held)
		}
	})
	t.Run("built answers wait only while those waiting hold less than the budget; past it they are refused at once", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		b.admit(ctx, nil, 80)
		admitted := make(chan int64, 2)
		go func() { took, _ := b.admitBuilt(ctx, nil, 50); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		if _, err := b.admitBuilt(ctx, nil, 60); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("a built answer of 60 behind 50 waiting = %v, want resource_exhausted at once", err)
		}
		go func() { took, _ := b.admitBuilt(ctx, nil, 40); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 2 })
		// An answer not yet built holds nothing while it waits: it may.
		go func() { took, _ := b.admit(ctx, nil, 60); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 3 })
		b.give(nil, 80)
		if first, second := <-admitted, <-admitted; first+second != 90 {
			t.Fatalf("admitted %d and %d, want the 50 and the 40 that waited", first, second)
		}
		b.mu.Lock()
		built := b.waitingBuilt
		b.mu.Unlock()
		if built != 0 {
			t.Fatalf("%d bytes of built answers counted as waiting after they were admitted", built)
		}
	})
	t.Run("a call whose caller leaves stops waiting and holds nothing", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		b.admit(ctx, nil, 100)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { _, err := b.admit(cctx, nil, 10); done <- err }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		cancel()
		if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("err = %v, want canceled", err)
		}
		b.give(nil, 100)
		if b.held != 0 || b.waiting.Len() != 0 {
			t.Fatalf("%d held, %d waiting, want none", b.held, b.waiting.Len())
		}
	})
}

// Each tenant's answers hold at most a quarter of the budget: one whose
// clients do not read fills its share, its next answers wait in a line
// of their own, and the other tenants' answers are admitted from the rest
// as if it were not there.
func TestATenantsShareOfTheSendBudget(t *testing.T) {
	ctx := context.Background()
	holders := func(b *sendBudget) (a, g *holder) {
		a, g = &holder{what: `tenant "acme"`}, &holder{what: `tenant "globex"`}
		b.holders = map[string]*holder{"acme": a, "globex": g}
		return a, g
	}
	t.Run("over its share a tenant waits in its own line, and the others pass", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		acme, globex := holders(b)
		if took, err := b.admit(ctx, acme, 20); err != nil || took != 20 {
			t.Fatalf("admit 20 of acme's = %d, %v", took, err)
		}
		admitted := make(chan int64)
		go func() { took, _ := b.admit(ctx, acme, 10); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		if took, err := b.admit(ctx, globex, 25); err != nil || took != 25 {
			t.Fatalf("globex's 25 behind acme's waiting 10 = %d, %v, want in at once", took, err)
		}
		if took, err := b.admit(ctx, nil, 50); err != nil || took != 50 {
			t.Fatalf("an admin's 50 beside acme's waiting 10 = %d, %v, want in at once", took, err)
		}
		select {
		case took := <-admitted:
			t.Fatalf("acme's 10 went in past its share (%d)", took)
		default:
		}
		b.give(acme, 20)
		if took := <-admitted; took != 10 {
			t.Fatalf("acme's waiting answer took %d, want 10", took)
		}
	})
	t.Run("a tenant's answer larger than its share takes the share, alone", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		acme, _ := holders(b)
		if took, err := b.admit(ctx, acme, 60); err != nil || took != 25 {
			t.Fatalf("admit 60 of acme's = %d, %v, want its share, 25", took, err)
		}
	})
	t.Run("a tenant whose answers are not sent is refused while the others' are", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: 100 * time.Millisecond}
		acme, globex := holders(b)
		b.admit(ctx, acme, 25)
		refused := make(chan error)
		go func() { _, err := b.admit(ctx, acme, 10); refused <- err }()
		// globex's answers keep being sent, which does not keep acme's
		// waiting: it waits for acme's own.
		for {
			select {
			case err := <-refused:
				if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), `tenant "acme"`) {
					t.Fatalf("err = %v, want resource_exhausted naming tenant \"acme\"", err)
				}
				b.mu.Lock()
				defer b.mu.Unlock()
				if acme.own.Len() != 0 || acme.held != 25 || b.held != 25 {
					t.Fatalf("a refused call left %d in acme's line, %d held of acme's, %d in all", acme.own.Len(), acme.held, b.held)
				}
				return
			default:
			}
			took, err := b.admit(ctx, globex, 20)
			if err != nil {
				t.Fatalf("globex's answer while acme's wait: %v", err)
			}
			b.give(globex, took)
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("built answers of a tenant wait only while its waiting ones hold less than its share", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		acme, globex := holders(b)
		b.admit(ctx, acme, 25)
		admitted := make(chan int64, 1)
		go func() { took, _ := b.admitBuilt(ctx, acme, 20); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		_, err := b.admitBuilt(ctx, acme, 10)
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "as many more wait") {
			t.Fatalf("acme's built 10 behind its 20 waiting = %v, want resource_exhausted at once", err)
		}
		if took, err := b.admitBuilt(ctx, globex, 25); err != nil || took != 25 {
			t.Fatalf("globex's built 25 = %d, %v, want in at once", took, err)
		}
		b.give(acme, 25)
		if took := <-admitted; took != 20 {
			t.Fatalf("acme's built answer took %d, want 20", took)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.waitingBuilt != 0 || acme.waitingBuilt != 0 {
			t.Fatalf("%d bytes (%d of acme's) counted as waiting after they were admitted", b.waitingBuilt, acme.waitingBuilt)
		}
	})
	t.Run("a tenant's waiting answer whose caller leaves holds nothing", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		acme, _ := holders(b)
		b.admit(ctx, acme, 25)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { _, err := b.admit(cctx, acme, 10); done <- err }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		cancel()
		if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("err = %v, want canceled", err)
		}
		b.give(acme, 25)
		if b.held != 0 || acme.held != 0 || acme.queued != 0 || acme.own.Len() != 0 || b.waiting.Len() != 0 {
			t.Fatalf("%d held (%d of acme's), %d queued, %d in acme's line, %d waiting: want none", b.held, acme.held, acme.queued, acme.own.Len(), b.waiting.Len())
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
