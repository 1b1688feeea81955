package store_test

import (
	"maps"
	"testing"

	"github.com/jobwatch/jobwatch/store"
)

// Served is each served tenant's strides past its effective pass in the
// state the turns were taken on: a tenant behind the clock is charged
// from the clock, and a tenant not served is not named.
func TestServedIsEachServedTenantsStrides(t *testing.T) {
	weights := map[string]int{"a": 2}
	read := store.FairState{Clock: 5, Passes: map[string]float64{"a": 4, "b": 5.25, "c": 9}}
	after := read.Clone()
	served := after.Turns(map[string]int{"a": 100, "b": 100, "c": 100}, weights, 5)

	count := map[string]int{}
	for _, tenant := range served {
		count[tenant]++
	}
	want := map[string]float64{}
	for tenant, k := range count {
		want[tenant] = float64(k) / float64(store.Weight(weights, tenant))
	}
	if got := after.Served(read); !maps.Equal(got, want) {
		t.Errorf("Served after turns %v = %v, want %v", served, got, want)
	}
	if count["c"] != 0 {
		t.Fatalf("turns %v served c, whose pass is far ahead: the case does not test what it means to", served)
	}
	if got := read.Clone().Served(read); len(got) != 0 {
		t.Errorf("Served with no turns taken = %v, want nothing", got)
	}
}
