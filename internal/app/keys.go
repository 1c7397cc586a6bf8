package app

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"rill/keys"
)

// openKeys loads the keys file at path (--api-keys-file) into a new Set.
func openKeys(path string, log *slog.Logger) (*keys.Set, error) {
	ks, err := keys.Load(path)
	if err != nil {
		return nil, err
	}
	log.Info("API keys loaded", slog.String("file", path), slog.Int("keys", len(ks)))
	return keys.NewSet(ks, keys.Options{}), nil
}

// reloadKeys puts the keys of the file at path in effect in set. A file
// that does not load leaves set as it was, and the error says why.
func reloadKeys(path string, set *keys.Set, log *slog.Logger) error {
	ks, err := keys.Load(path)
	if err != nil {
		log.Error("API keys not reloaded; the old keys stay in effect", slog.String("file", path), slog.Any("err", err))
		return err
	}
	set.Replace(ks)
	log.Info("API keys reloaded", slog.String("file", path), slog.Int("keys", len(ks)))
	return nil
}

// watchKeys reloads the keys file at path into set on every SIGHUP until
// stop is called; stop returns once the watching goroutine has ended.
func watchKeys(path string, set *keys.Set, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-hup:
				_ = reloadKeys(path, set, log)
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
