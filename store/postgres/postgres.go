// Package postgres is a shared durable store.Store in a PostgreSQL
// database, through pgx, for several rill replicas. Its tables (responses,
// items, streams, events, rill_schema and the sequence rill_stored) live in
// the database and search_path the URL names; give rill a database (or a
// schema) of its own.
//
// Durability is PostgreSQL's: a call that returned nil is committed.
// Writers of one stream's log are kept apart by a row lock on the stream.
package postgres

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"rill/store"
	"rill/store/internal/sqlstore"
)

// schemaVersion is the schema this code writes, kept in rill_schema; a
// later version reads it to know what to migrate.
const schemaVersion = 1

var schema = []string{
	`CREATE TABLE IF NOT EXISTS rill_schema (version INTEGER NOT NULL)`,
	`CREATE SEQUENCE IF NOT EXISTS rill_stored`,
	`CREATE TABLE IF NOT EXISTS responses (
		id TEXT PRIMARY KEY,
		parent TEXT NOT NULL DEFAULT '',
		items TEXT NOT NULL DEFAULT '',
		data BYTEA NOT NULL,
		created BIGINT NOT NULL,
		visible SMALLINT NOT NULL,
		stored BIGINT NOT NULL)`,
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
		data BYTEA NOT NULL,
		created BIGINT NOT NULL,
		updated BIGINT NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS streams_updated ON streams (updated)`,
	`CREATE TABLE IF NOT EXISTS events (
		stream TEXT NOT NULL,
		seq BIGINT NOT NULL,
		data BYTEA NOT NULL,
		PRIMARY KEY (stream, seq))`,
}

var dialect = sqlstore.Dialect{
	Name:       "postgres",
	Dollar:     true,
	Position:   `strpos(%[2]s, %[1]s)`,
	NextStored: `nextval('rill_stored')`,
	LockStream: `FOR UPDATE`,
}

// Store is the PostgreSQL store.
type Store struct {
	*sqlstore.Store
}

// Open connects to the database at url (postgres://user@host:port/db?…),
// makes or checks its schema, and returns a store that keeps keep.
func Open(ctx context.Context, url string, keep store.Retention) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	db.SetMaxIdleConns(8)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	return &Store{sqlstore.New(db, dialect, keep)}, nil
}

// migrate makes the schema, idempotently; replicas that start together
// take turns on an advisory lock. It refuses a schema a newer rill wrote.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The lock's key is arbitrary and rill's own: "rill" in ASCII.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(1919511660)`); err != nil {
		return err
	}
	for _, q := range schema {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
	}
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM rill_schema`).Scan(&v); err != nil {
		return err
	}
	switch {
	case v.Int64 > schemaVersion:
		return fmt.Errorf("schema version %d is newer than this rill's %d", v.Int64, schemaVersion)
	case !v.Valid:
		if _, err := tx.ExecContext(ctx, `INSERT INTO rill_schema (version) VALUES ($1)`, schemaVersion); err != nil {
			return err
		}
	}
	return tx.Commit()
}
