// Package sqlite is the embedded durable store.Store: one SQLite file
// (<data-dir>/rill.db) through the pure-Go modernc.org/sqlite driver, so
// rill stays one static binary.
//
// Durability: the database runs in WAL mode with synchronous=NORMAL. A
// committed transaction (every Store call that returned nil) survives the
// process being killed, kill -9 included, because its pages are in the WAL
// file before the call returns; it may be lost to an OS crash or a power
// cut (NORMAL syncs the WAL at checkpoints, not at every commit), and the
// database is not corrupted by either. TestKill9 shows the first bound.
//
// One process at a time should serve a data directory; SQLite's locks make
// a second one safe but slow. Shared stores for several replicas are
// store/redis and store/postgres.
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"rill/store"
	"rill/store/internal/sqlstore"
)

// FileName is the database's name under the data directory.
const FileName = "rill.db"

// schemaVersion is the schema this code writes, kept in PRAGMA
// user_version; a later version reads it to know what to migrate.
const schemaVersion = 1

var schema = []string{
	`CREATE TABLE IF NOT EXISTS responses (
		id TEXT PRIMARY KEY,
		parent TEXT NOT NULL DEFAULT '',
		items TEXT NOT NULL DEFAULT '',
		data BLOB NOT NULL,
		created INTEGER NOT NULL,
		visible INTEGER NOT NULL,
		stored INTEGER NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS responses_parent ON responses (parent)`,
	`CREATE INDEX IF NOT EXISTS responses_stored ON responses (stored)`,
	`CREATE INDEX IF NOT EXISTS responses_created ON responses (visible, created)`,
	`CREATE TABLE IF NOT EXISTS items (
		item TEXT PRIMARY KEY,
		response TEXT NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS items_response ON items (response)`,
	`CREATE TABLE IF NOT EXISTS streams (
		id TEXT PRIMARY KEY,
		status TEXT NOT NULL,
		data BLOB NOT NULL,
		created INTEGER NOT NULL,
		updated INTEGER NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS streams_updated ON streams (updated)`,
	`CREATE TABLE IF NOT EXISTS events (
		stream TEXT NOT NULL,
		seq INTEGER NOT NULL,
		data BLOB NOT NULL,
		PRIMARY KEY (stream, seq)) WITHOUT ROWID`,
}

var dialect = sqlstore.Dialect{
	Name:       "sqlite",
	Position:   `instr(%[2]s, %[1]s)`,
	NextStored: `(SELECT COALESCE(MAX(stored), 0) + 1 FROM responses)`,
	// A write transaction is BEGIN IMMEDIATE (see Open): it already keeps
	// every other writer out.
}

// Store is the SQLite store.
type Store struct {
	*sqlstore.Store
}

// Open opens (creating it and dir if need be) the database dir/rill.db and
// returns a store over it that keeps keep.
func Open(ctx context.Context, dir string, keep store.Retention) (*Store, error) {
	// Stored responses are people's conversations: the directory and the
	// database (whose permissions SQLite gives its -wal and -shm files)
	// are the user's alone.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	path := filepath.Join(dir, FileName)
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	} else {
		f.Close()
	}
	// BEGIN IMMEDIATE takes the write lock at the start of a transaction,
	// so two writers wait on busy_timeout instead of one failing when it
	// upgrades a read to a write.
	q := url.Values{}
	q.Add("_txlock", "immediate")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite store: %s: %w", path, err)
	}
	return &Store{sqlstore.New(db, dialect, keep)}, nil
}

// migrate brings the schema to schemaVersion; it refuses a database that a
// newer rill wrote.
func migrate(ctx context.Context, db *sql.DB) error {
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this rill's %d", v, schemaVersion)
	}
	if v == schemaVersion {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range schema {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// IntegrityCheck runs SQLite's integrity_check and returns its first line
// ("ok" for a sound database).
func (s *Store) IntegrityCheck(ctx context.Context) (string, error) {
	var out string
	err := s.DB().QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&out)
	return out, err
}
