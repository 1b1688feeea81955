package shallow

import (
	"errors"
	"testing"
)

func TestCall(t *testing.T) {
	t.Run("returns what the function returned", func(t *testing.T) {
		want := errors.New("no such job")
		v, err := Call(func() (string, error) { return "tenant-a", want })
		if v != "tenant-a" || err != want {
			t.Fatalf("got %q, %v; want tenant-a, %v", v, err, want)
		}
		if err := Do(func() error { return nil }); err != nil {
			t.Fatalf("Do: %v", err)
		}
	})
	t.Run("a panic in the function reaches the caller's recover", func(t *testing.T) {
		defer func() {
			if p := recover(); p != "store exploded" {
				t.Fatalf("recovered %v, want the function's panic", p)
			}
		}()
		_ = Do(func() error { panic("store exploded") })
		t.Fatal("Do returned after its function panicked")
	})
}
