package postgres

import (
	"context"
	"sync"
	"testing"

	"rill/store"
	"rill/store/storetest"
	"rill/store/testserver"
)

func open(t testing.TB, url string, keep store.Retention) *Store {
	s, err := Open(context.Background(), url, keep)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestContract runs the contract with a database each; Reopen crashes
// and restarts the server between Close and Open.
func TestContract(t *testing.T) {
	pg := testserver.StartPostgres(t, false)
	var mu sync.Mutex
	urls := map[store.Store]string{}
	keeps := map[store.Store]store.Retention{}
	remember := func(s store.Store, url string, keep store.Retention) store.Store {
		mu.Lock()
		defer mu.Unlock()
		urls[s], keeps[s] = url, keep
		return s
	}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, keep store.Retention) store.Store {
			url := pg.NewDatabase(t)
			return remember(open(t, url, keep), url, keep)
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			mu.Lock()
			url, keep := urls[s], keeps[s]
			mu.Unlock()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			pg.Crash(t) // what was committed survives the server's crash too
			return remember(open(t, url, keep), url, keep)
		},
	})
}

// TestSchema opens one database from several replicas at once (the schema
// is made once, idempotently) and refuses a schema a newer rill wrote.
func TestSchema(t *testing.T) {
	ctx := context.Background()
	pg := testserver.StartPostgres(t, false)
	url := pg.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			s, err := Open(ctx, url, store.Retention{})
			if err == nil {
				err = s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("open beside other replicas: %v", err)
		}
	}
	s := open(t, url, store.Retention{})
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM rill_schema`).Scan(&n); err != nil || n != 1 {
		t.Errorf("rill_schema rows: %d, %v; want 1", n, err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE rill_schema SET version = $1`, schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := Open(ctx, url, store.Retention{}); err == nil {
		s.Close()
		t.Error("opened a schema a newer rill wrote")
	}
}

func BenchmarkStore(b *testing.B) {
	pg := testserver.StartPostgres(b, true)
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b, pg.NewDatabase(b), store.Retention{}) })
}

func TestShared(t *testing.T) {
	url := testserver.StartPostgres(t, false).NewDatabase(t)
	a, b := open(t, url, store.Retention{}), open(t, url, store.Retention{})
	defer a.Close()
	defer b.Close()
	storetest.RunShared(t, a, b)
}
