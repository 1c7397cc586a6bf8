package store_test

import (
	"testing"

	"rill/store"
	"rill/store/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, keep store.Retention) store.Store { return store.NewMemory(keep) },
	})
}

func BenchmarkMemory(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return store.NewMemory(store.Retention{}) })
}
