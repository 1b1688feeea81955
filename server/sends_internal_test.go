package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestTheSendBudget(t *testing.T) {
	ctx := context.Background()
	t.Run("a call over the budget waits its turn and is let in when room is given back", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		if took, err := b.admit(ctx, 80); err != nil || took != 80 {
			t.Fatalf("admit 80 = %d, %v", took, err)
		}
		admitted := make(chan int64)
		go func() {
			took, _ := b.admit(ctx, 50)
			admitted <- took
		}()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		select {
		case <-admitted:
			t.Fatal("admitted past the budget")
		default:
		}
		b.give(80)
		if took := <-admitted; took != 50 {
			t.Fatalf("took %d, want 50", took)
		}
	})
	t.Run("first come first served: a small call does not pass a large one waiting", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		b.admit(ctx, 60)
		order := make(chan int64, 2)
		go func() { took, _ := b.admit(ctx, 95); order <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		// 10 would fit beside the 60 held, but the 95 came first.
		go func() { took, _ := b.admit(ctx, 10); order <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 2 })
		select {
		case took := <-order:
			t.Fatalf("%d went in before the 95 that waited first", took)
		case <-time.After(20 * time.Millisecond):
		}
		b.give(60)
		if first := <-order; first != 95 {
			t.Fatalf("%d went first, want the 95 that waited first", first)
		}
		b.give(95)
		if second := <-order; second != 10 {
			t.Fatalf("then %d, want 10", second)
		}
	})
	t.Run("an answer larger than the budget takes all of it, alone", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		if took, err := b.admit(ctx, 1000); err != nil || took != 100 {
			t.Fatalf("admit 1000 = %d, %v, want 100", took, err)
		}
	})
	t.Run("a call is refused when nothing has been sent for the stall", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: 50 * time.Millisecond}
		b.admit(ctx, 100)
		_, err := b.admit(ctx, 10)
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("err = %v, want resource_exhausted", err)
		}
		if b.waiting.Len() != 0 || b.held != 100 {
			t.Fatalf("a refused call left %d waiting, %d held", b.waiting.Len(), b.held)
		}
	})
	t.Run("built answers wait only while those waiting hold less than the budget; past it they are refused at once", func(t *testing.T) {
		b := &sendBudget{limit: 100, stall: time.Minute}
		b.admit(ctx, 80)
		admitted := make(chan int64, 2)
		go func() { took, _ := b.admitBuilt(ctx, 50); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		if _, err := b.admitBuilt(ctx, 60); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("a built answer of 60 behind 50 waiting = %v, want resource_exhausted at once", err)
		}
		go func() { took, _ := b.admitBuilt(ctx, 40); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 2 })
		// An answer not yet built holds nothing while it waits: it may.
		go func() { took, _ := b.admit(ctx, 60); admitted <- took }()
		waitFor(t, func() bool { return b.waits.Load() == 3 })
		b.give(80)
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
		b.admit(ctx, 100)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { _, err := b.admit(cctx, 10); done <- err }()
		waitFor(t, func() bool { return b.waits.Load() == 1 })
		cancel()
		if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("err = %v, want canceled", err)
		}
		b.give(100)
		if b.held != 0 || b.waiting.Len() != 0 {
			t.Fatalf("%d held, %d waiting, want none", b.held, b.waiting.Len())
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
