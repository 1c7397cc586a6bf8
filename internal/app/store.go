package app

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"rill/config"
	"rill/service"
	"rill/store"
	"rill/store/postgres"
	redisstore "rill/store/redis"
	"rill/store/sqlite"
)

// StoreSpec says which store serve opens and what it keeps.
type StoreSpec struct {
	// Backend is "memory", "sqlite", or the URL of a shared store
	// (redis://, rediss://, postgres://, postgresql://); empty: sqlite
	// when DataDir is set, else memory.
	Backend string
	// DataDir is the data directory; the sqlite store's database lives
	// there, and only the sqlite store uses it.
	DataDir string
	// Keep bounds what the store keeps.
	Keep store.Retention
}

// OpenStore opens the store spec names. It returns, besides, how to name
// the store in the log: its kind and where it is, with no password.
func OpenStore(ctx context.Context, spec StoreSpec) (store.Store, string, error) {
	backend := spec.Backend
	if backend == "" {
		backend = "memory"
		if spec.DataDir != "" {
			backend = "sqlite"
		}
	}
	switch backend {
	case "memory":
		if spec.DataDir != "" {
			return nil, "", errors.New("store memory keeps nothing in the data directory: leave out the data directory, or choose store sqlite")
		}
		keep := spec.Keep
		// As the service's own default: the event logs of ended streams
		// must not grow without end in memory.
		keep.MaxBytes = cmp.Or(keep.MaxBytes, service.DefaultMemoryStoreBytes)
		return store.NewMemory(keep), "memory", nil
	case "sqlite":
		if spec.DataDir == "" {
			return nil, "", errors.New("store sqlite needs a data directory (--data-dir) for its database")
		}
		s, err := sqlite.Open(ctx, spec.DataDir, spec.Keep)
		return s, "sqlite " + spec.DataDir, err
	}
	u, err := url.Parse(backend)
	if err != nil || u.Host == "" {
		return nil, "", fmt.Errorf("store %q: want memory, sqlite, or a redis:// or postgres:// URL", backend)
	}
	if spec.DataDir != "" {
		return nil, "", fmt.Errorf("store %s keeps nothing in the data directory: leave it out", u.Redacted())
	}
	switch u.Scheme {
	case "redis", "rediss":
		s, err := redisstore.Open(ctx, backend, spec.Keep)
		return s, u.Redacted(), err
	case "postgres", "postgresql":
		s, err := postgres.Open(ctx, backend, spec.Keep)
		return s, u.Redacted(), err
	}
	return nil, "", fmt.Errorf("store %s: unknown scheme %q: want redis, rediss, postgres or postgresql", u.Redacted(), u.Scheme)
}

// storeFlags are serve's flags of the store.
type storeFlags struct {
	backend, dataDir *string
	maxAge           *time.Duration
	maxBytes         config.Bytes
}

func registerStoreFlags(fs *flag.FlagSet) *storeFlags {
	f := &storeFlags{
		backend: fs.String("store", "", `where stored responses and the event logs of background and resumable streams live: memory (nothing survives a restart), sqlite (<data-dir>/rill.db), or a shared store's URL, redis://host:port/db or postgres://user@host:port/db (default: sqlite with --data-dir, else memory)`),
		dataDir: fs.String("data-dir", "", "data directory: the sqlite store's database is <data-dir>/rill.db (default: none)"),
		maxAge:  fs.Duration("store-max-age", 0, "hide stored responses and drop streams older than this (default 0: no age limit)"),
	}
	fs.Var(&f.maxBytes, "store-max-bytes", "bound of the data the store keeps: bytes, or a size such as 1GiB; the oldest go first (default: none)")
	return f
}

// spec merges the flags given on the command line (fs has parsed them)
// with the configuration file's keys (file may be nil): a flag given wins,
// then the file's key, then the flag's default. responsesStore is
// --responses-store, MaxResponses.
func (f *storeFlags) spec(fs *flag.FlagSet, file *config.File, responsesStore int) (StoreSpec, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if *f.maxAge < 0 || f.maxBytes < 0 {
		return StoreSpec{}, errors.New("--store-max-age and --store-max-bytes must not be negative")
	}
	spec := StoreSpec{Backend: *f.backend, DataDir: *f.dataDir,
		Keep: store.Retention{MaxAge: *f.maxAge, MaxBytes: int64(f.maxBytes), MaxResponses: responsesStore}}
	if file == nil {
		return spec, nil
	}
	spec.Backend = cmp.Or(spec.Backend, file.Store.Backend)
	spec.DataDir = cmp.Or(spec.DataDir, file.DataDir)
	spec.Keep.MaxAge = cmp.Or(spec.Keep.MaxAge, file.Store.MaxAge.D())
	spec.Keep.MaxBytes = cmp.Or(spec.Keep.MaxBytes, int64(file.Store.MaxBytes))
	if !set["responses-store"] && file.Store.MaxResponses > 0 {
		spec.Keep.MaxResponses = file.Store.MaxResponses
	}
	return spec, nil
}

// openServeStore opens serve's store from its flags and the configuration
// file at configFile (empty for none), and starts sweeping it every
// minute; the returned func stops the sweeps and closes the store.
func openServeStore(ctx context.Context, fs *flag.FlagSet, f *storeFlags, configFile string, responsesStore int, log *slog.Logger) (store.Store, func(), error) {
	var file *config.File
	if configFile != "" {
		var err error
		if file, err = config.Load(configFile); err != nil {
			return nil, nil, err
		}
	}
	spec, err := f.spec(fs, file, responsesStore)
	if err != nil {
		return nil, nil, err
	}
	s, where, err := OpenStore(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	log.Info("store open", slog.String("store", where), slog.Duration("max_age", spec.Keep.MaxAge),
		slog.Int64("max_bytes", spec.Keep.MaxBytes), slog.Int("max_responses", spec.Keep.MaxResponses))
	stop := sweepStore(s, sweepEvery, log)
	return s, func() {
		stop()
		if err := s.Close(); err != nil {
			log.Warn("store close", slog.Any("error", err))
		}
	}, nil
}

// sweepEvery is how often serve applies the store's retention.
const sweepEvery = time.Minute

// sweepStore sweeps s now and then every interval, until the returned
// func is called; that func waits for a sweep under way to end.
func sweepStore(s store.Store, every time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			r, n, err := s.Sweep(ctx, time.Now())
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("store sweep", slog.Any("error", err))
			case r > 0 || n > 0:
				log.Info("store sweep", slog.Int("responses", r), slog.Int("streams", n))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// serveStore is the store serve hands the service: none when
// --responses-store is 0, which keeps nothing (and turns off what needs a
// store); the store is still opened and closed, its flags checked.
func serveStore(st store.Store, responsesStore int) store.Store {
	if responsesStore == 0 {
		return nil
	}
	return st
}
