// Package sqlstore is store.Store over database/sql: the one implementation
// behind store/sqlite and store/postgres, which differ only in their driver,
// their schema's column types and a few phrases of SQL (a Dialect).
//
// Tables: responses (one row per held response, hidden ones included, with
// a visible flag and a stored counter that orders them by when they were
// last stored), items (output item id -> visible response), streams, and
// events (stream, seq) -> data. Times are Unix nanoseconds.
//
// Retention applies when Sweep runs, not as the store writes: counting
// rows and bytes on every write would cost every request a scan, and serve
// sweeps every minute.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"rill/store"
)

// ErrClosed is returned by every call on a closed store.
var ErrClosed = errors.New("store is closed")

// Dialect is what differs between the databases.
type Dialect struct {
	// Name names the database in errors ("sqlite", "postgres").
	Name string
	// Dollar rewrites the ? placeholders of the shared queries as $1, $2, …
	Dollar bool
	// NextStored is the SQL expression for the next value of the stored
	// counter (responses.stored).
	NextStored string
	// Position is the SQL of the position of substring %[1]s in %[2]s, 0
	// for none, as a format for fmt.Sprintf.
	Position string
	// LockStream is appended to the query that reads a stream's row before
	// appending to its log, to keep two writers of one stream apart ("FOR
	// UPDATE"); empty where a write transaction already excludes others.
	LockStream string
}

// Store is store.Store over one *sql.DB whose schema is in place.
type Store struct {
	db   *sql.DB
	d    Dialect
	keep store.Retention
	q    queries
}

// New returns a store over db, which the caller has opened and whose schema
// it has made; Close closes db.
func New(db *sql.DB, d Dialect, keep store.Retention) *Store {
	s := &Store{db: db, d: d, keep: keep}
	s.q = makeQueries(d)
	return s
}

// DB is the database under the store, for its implementation's own checks.
func (s *Store) DB() *sql.DB { return s.db }

type queries struct {
	getResp, itemResp, oldResp, insResp, updResp                         string
	delItemsOf, insItem, hide, lineage, collect, delResp                 string
	getStream, putStream, lockStream, insEvents, events                  string
	streamExists, delEvents, delStream                                   string
	countVisible, oldestVisible, oldestIDs, visibleBefore, streamsBefore string
	oldestStream                                                         string
	totalBytes, streamBytes                                              string
}

func makeQueries(d Dialect) queries {
	q := queries{
		getResp:    `SELECT id, parent, items, data, created FROM responses WHERE id = ? AND visible = 1`,
		itemResp:   `SELECT r.id, r.parent, r.items, r.data, r.created FROM items i JOIN responses r ON r.id = i.response WHERE i.item = ? AND r.visible = 1`,
		oldResp:    `SELECT parent FROM responses WHERE id = ?`,
		insResp:    `INSERT INTO responses (id, parent, items, data, created, visible, stored) VALUES (?, ?, ?, ?, ?, 1, ` + d.NextStored + `)`,
		updResp:    `UPDATE responses SET parent = ?, items = ?, data = ?, created = ?, visible = 1, stored = ` + d.NextStored + ` WHERE id = ?`,
		delItemsOf: `DELETE FROM items WHERE response = ?`,
		insItem:    `INSERT INTO items (item, response) VALUES (?, ?) ON CONFLICT (item) DO UPDATE SET response = excluded.response`,
		hide:       `UPDATE responses SET visible = 0 WHERE id = ? AND visible = 1`,
		// The path of ids walked so far ends a cycle that replaced
		// responses could close: a response met again is not followed.
		lineage: `WITH RECURSIVE chain (id, parent, items, data, created, depth, path) AS (
			SELECT id, parent, items, data, created, 1, ',' || id || ',' FROM responses WHERE id = ? AND visible = 1
			UNION ALL
			SELECT r.id, r.parent, r.items, r.data, r.created, c.depth + 1, c.path || r.id || ',' FROM responses r JOIN chain c ON r.id = c.parent
			WHERE c.parent <> '' AND c.depth < CAST(? AS BIGINT) AND ` + fmt.Sprintf(d.Position, "',' || r.id || ','", "c.path") + ` = 0)
			SELECT id, parent, items, data, created FROM chain ORDER BY depth`,
		collect: `DELETE FROM responses WHERE id = ? AND visible = 0
			AND NOT EXISTS (SELECT 1 FROM responses c WHERE c.parent = responses.id AND c.id <> responses.id)
			RETURNING parent, COALESCE(LENGTH(data), 0)`,
		delResp: `DELETE FROM responses WHERE id = ?`,

		getStream: `SELECT id, status, data, created, updated FROM streams WHERE id = ?`,
		putStream: `INSERT INTO streams (id, status, data, created, updated) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, data = excluded.data, updated = excluded.updated`,
		lockStream:   `SELECT (SELECT MAX(seq) FROM events WHERE stream = ?) FROM streams WHERE id = ? ` + d.LockStream,
		insEvents:    `INSERT INTO events (stream, seq, data) VALUES `,
		events:       `SELECT seq, data FROM events WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?`,
		streamExists: `SELECT 1 FROM streams WHERE id = ?`,
		delEvents:    `DELETE FROM events WHERE stream = ?`,
		delStream:    `DELETE FROM streams WHERE id = ?`,

		countVisible:  `SELECT COUNT(*) FROM responses WHERE visible = 1`,
		oldestVisible: `SELECT id, created FROM responses WHERE visible = 1 ORDER BY stored LIMIT 1`,
		oldestIDs:     `SELECT id FROM responses WHERE visible = 1 ORDER BY stored LIMIT ?`,
		visibleBefore: `SELECT id FROM responses WHERE visible = 1 AND created < ?`,
		streamsBefore: `SELECT id FROM streams WHERE updated < ?`,
		oldestStream:  `SELECT id, updated FROM streams ORDER BY updated, id LIMIT 1`,
		totalBytes: `SELECT (SELECT COALESCE(SUM(LENGTH(data)), 0) FROM responses) +
			(SELECT COALESCE(SUM(LENGTH(data)), 0) FROM streams) + (SELECT COALESCE(SUM(LENGTH(data)), 0) FROM events)`,
		streamBytes: `SELECT (SELECT COALESCE(LENGTH(data), 0) FROM streams WHERE id = ?) + (SELECT COALESCE(SUM(LENGTH(data)), 0) FROM events WHERE stream = ?)`,
	}
	if d.Dollar {
		for _, p := range []*string{&q.getResp, &q.itemResp, &q.oldResp, &q.insResp, &q.updResp,
			&q.delItemsOf, &q.insItem, &q.hide, &q.lineage, &q.collect, &q.delResp,
			&q.getStream, &q.putStream, &q.lockStream, &q.events,
			&q.streamExists, &q.delEvents, &q.delStream,
			&q.countVisible, &q.oldestVisible, &q.oldestIDs, &q.visibleBefore, &q.streamsBefore, &q.oldestStream,
			&q.totalBytes, &q.streamBytes} {
			*p = dollar(*p)
		}
	}
	return q
}

// dollar numbers the ? placeholders of q as $1, $2, … (the queries hold no
// ? inside a literal).
func dollar(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// wrap marks an error of the database with the store's name; a closed
// database reads as ErrClosed.
func (s *Store) wrap(op string, err error) error {
	if err == nil || errors.Is(err, store.ErrNotFound) {
		return err
	}
	if strings.Contains(err.Error(), "sql: database is closed") {
		err = ErrClosed
	}
	return fmt.Errorf("%s store: %s: %w", s.d.Name, op, err)
}

// tx runs f in a transaction, committed when f returns nil.
func (s *Store) tx(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(op, err)
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return s.wrap(op, err)
	}
	return s.wrap(op, tx.Commit())
}

func scanResponse(sc interface{ Scan(...any) error }) (store.Response, error) {
	var r store.Response
	var items string
	var created int64
	if err := sc.Scan(&r.ID, &r.Parent, &items, &r.Data, &created); err != nil {
		return r, err
	}
	if items != "" {
		if err := json.Unmarshal([]byte(items), &r.Items); err != nil {
			return r, fmt.Errorf("response %s: items: %w", r.ID, err)
		}
	}
	r.Created = time.Unix(0, created)
	return r, nil
}

func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// PutResponse implements store.Store.
func (s *Store) PutResponse(ctx context.Context, r store.Response) error {
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	items := ""
	if len(r.Items) > 0 {
		b, err := json.Marshal(r.Items)
		if err != nil {
			return err
		}
		items = string(b)
	}
	return s.tx(ctx, "put response", func(tx *sql.Tx) error {
		var oldParent string
		err := tx.QueryRowContext(ctx, s.q.oldResp, r.ID).Scan(&oldParent)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, s.q.insResp, r.ID, r.Parent, items, nonNil(r.Data), r.Created.UnixNano())
			if err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			// Replacing: the old items stop resolving to it; its old
			// parent may now be named by nothing.
			if _, err := tx.ExecContext(ctx, s.q.delItemsOf, r.ID); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, s.q.updResp, r.Parent, items, nonNil(r.Data), r.Created.UnixNano(), r.ID)
			if err != nil {
				return err
			}
		}
		for _, it := range r.Items {
			if _, err := tx.ExecContext(ctx, s.q.insItem, it, r.ID); err != nil {
				return err
			}
		}
		if oldParent != "" && oldParent != r.Parent && oldParent != r.ID {
			_, err := s.collect(ctx, tx, oldParent)
			return err
		}
		return nil
	})
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// GetResponse implements store.Store.
func (s *Store) GetResponse(ctx context.Context, id string) (store.Response, error) {
	r, err := scanResponse(s.db.QueryRowContext(ctx, s.q.getResp, id))
	return r, s.wrap("get response", notFound(err))
}

// ResponseByItem implements store.Store.
func (s *Store) ResponseByItem(ctx context.Context, itemID string) (store.Response, error) {
	r, err := scanResponse(s.db.QueryRowContext(ctx, s.q.itemResp, itemID))
	return r, s.wrap("response by item", notFound(err))
}

// DeleteResponse implements store.Store.
func (s *Store) DeleteResponse(ctx context.Context, id string) error {
	return s.tx(ctx, "delete response", func(tx *sql.Tx) error {
		ok, err := s.hide(ctx, tx, id)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		_, err = s.collect(ctx, tx, id)
		return err
	})
}

// hide takes response id out of sight; false if it was not visible.
func (s *Store) hide(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	res, err := tx.ExecContext(ctx, s.q.hide, id)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	_, err = tx.ExecContext(ctx, s.q.delItemsOf, id)
	return true, err
}

// collect removes response id for good if it is hidden and no held
// response names it as Parent, then its parent if that leaves it so, and
// on up; it returns the bytes of Data it freed.
func (s *Store) collect(ctx context.Context, tx *sql.Tx, id string) (int64, error) {
	var freed int64
	for id != "" {
		var parent string
		var n int64
		err := tx.QueryRowContext(ctx, s.q.collect, id).Scan(&parent, &n)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return freed, err
		}
		freed += n
		if parent == id {
			break
		}
		id = parent
	}
	return freed, nil
}

// Lineage implements store.Store.
func (s *Store) Lineage(ctx context.Context, id string, max int) ([]store.Response, error) {
	limit := int64(max)
	if max <= 0 {
		limit = 1 << 62
	}
	rows, err := s.db.QueryContext(ctx, s.q.lineage, id, limit)
	if err != nil {
		return nil, s.wrap("lineage", err)
	}
	defer rows.Close()
	var out []store.Response
	for rows.Next() {
		r, err := scanResponse(rows)
		if err != nil {
			return nil, s.wrap("lineage", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("lineage", err)
	}
	if len(out) == 0 {
		return nil, store.ErrNotFound
	}
	return out, nil
}

// PutStream implements store.Store.
func (s *Store) PutStream(ctx context.Context, st store.Stream) error {
	if st.Updated.IsZero() {
		st.Updated = time.Now()
	}
	if st.Created.IsZero() {
		st.Created = st.Updated
	}
	// One upsert, which keeps an existing stream's created: two replicas
	// putting a new stream at once do not collide.
	_, err := s.db.ExecContext(ctx, s.q.putStream, st.ID, st.Status, nonNil(st.Data), st.Created.UnixNano(), st.Updated.UnixNano())
	return s.wrap("put stream", err)
}

// GetStream implements store.Store.
func (s *Store) GetStream(ctx context.Context, id string) (store.Stream, error) {
	var st store.Stream
	var created, updated int64
	err := s.db.QueryRowContext(ctx, s.q.getStream, id).Scan(&st.ID, &st.Status, &st.Data, &created, &updated)
	if err != nil {
		return store.Stream{}, s.wrap("get stream", notFound(err))
	}
	st.Created, st.Updated = time.Unix(0, created), time.Unix(0, updated)
	return st, nil
}

// AppendEvents implements store.Store: one statement reads (and, where
// the dialect locks, locks) the stream and its last seq, one inserts the
// new events.
func (s *Store) AppendEvents(ctx context.Context, id string, events []store.Event) error {
	return s.tx(ctx, "append events", func(tx *sql.Tx) error {
		var last sql.NullInt64
		if err := tx.QueryRowContext(ctx, s.q.lockStream, id, id).Scan(&last); err != nil {
			return notFound(err)
		}
		var fresh []store.Event
		for _, ev := range events {
			if !last.Valid || ev.Seq > last.Int64 {
				fresh = append(fresh, ev)
				last = sql.NullInt64{Int64: ev.Seq, Valid: true}
			}
		}
		// A statement's placeholders are bounded (32,766 in SQLite):
		// insertBatch events a statement.
		for len(fresh) > 0 {
			n := min(len(fresh), insertBatch)
			var b strings.Builder
			b.WriteString(s.q.insEvents)
			args := make([]any, 0, 3*n)
			for i, ev := range fresh[:n] {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString("(?, ?, ?)")
				args = append(args, id, ev.Seq, nonNil(ev.Data))
			}
			q := b.String()
			if s.d.Dollar {
				q = dollar(q)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
			fresh = fresh[n:]
		}
		return nil
	})
}

// insertBatch is how many events one INSERT writes.
const insertBatch = 500

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, id string, after int64, limit int) ([]store.Event, error) {
	n := int64(limit)
	if limit <= 0 {
		n = 1 << 62
	}
	rows, err := s.db.QueryContext(ctx, s.q.events, id, after, n)
	if err != nil {
		return nil, s.wrap("events", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var ev store.Event
		if err := rows.Scan(&ev.Seq, &ev.Data); err != nil {
			return nil, s.wrap("events", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("events", err)
	}
	if len(out) == 0 {
		// An empty answer is either an empty tail or no stream at all.
		var one int
		if err := s.db.QueryRowContext(ctx, s.q.streamExists, id).Scan(&one); err != nil {
			return nil, s.wrap("events", notFound(err))
		}
	}
	return out, nil
}

// DeleteStream implements store.Store.
func (s *Store) DeleteStream(ctx context.Context, id string) error {
	return s.tx(ctx, "delete stream", func(tx *sql.Tx) error {
		ok, err := s.dropStream(ctx, tx, id)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
}

// dropStream deletes stream id and its events. The stream's row goes
// first: that waits for an append under way (which holds the row), so the
// events it adds are deleted too, not left to a stream made again later.
func (s *Store) dropStream(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	res, err := tx.ExecContext(ctx, s.q.delStream, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return false, err
	}
	_, err = tx.ExecContext(ctx, s.q.delEvents, id)
	return true, err
}

// Sweep implements store.Store: in one transaction, MaxAge, then
// MaxResponses, then MaxBytes.
func (s *Store) Sweep(ctx context.Context, now time.Time) (responses, streams int, err error) {
	err = s.tx(ctx, "sweep", func(tx *sql.Tx) error {
		if s.keep.MaxAge > 0 {
			cut := now.Add(-s.keep.MaxAge).UnixNano()
			ids, err := column[string](ctx, tx, s.q.visibleBefore, cut)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if ok, err := s.hide(ctx, tx, id); err != nil {
					return err
				} else if ok {
					responses++
				}
				if _, err := s.collect(ctx, tx, id); err != nil {
					return err
				}
			}
			if ids, err = column[string](ctx, tx, s.q.streamsBefore, cut); err != nil {
				return err
			}
			for _, id := range ids {
				if ok, err := s.dropStream(ctx, tx, id); err != nil {
					return err
				} else if ok {
					streams++
				}
			}
		}
		if s.keep.MaxResponses > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, s.q.countVisible).Scan(&n); err != nil {
				return err
			}
			if over := n - s.keep.MaxResponses; over > 0 {
				ids, err := column[string](ctx, tx, s.q.oldestIDs, over)
				if err != nil {
					return err
				}
				for _, id := range ids {
					if _, err := s.hide(ctx, tx, id); err != nil {
						return err
					}
					responses++
					if _, err := s.collect(ctx, tx, id); err != nil {
						return err
					}
				}
			}
		}
		if s.keep.MaxBytes > 0 {
			r, n, err := s.enforceBytes(ctx, tx)
			responses += r
			streams += n
			if err != nil {
				return err
			}
		}
		return nil
	})
	return responses, streams, err
}

// enforceBytes hides responses and drops streams, the older of the oldest
// of each first, until the Data held fits MaxBytes or only hidden
// responses that others name are left.
func (s *Store) enforceBytes(ctx context.Context, tx *sql.Tx) (responses, streams int, err error) {
	var total int64
	if err := tx.QueryRowContext(ctx, s.q.totalBytes).Scan(&total); err != nil {
		return 0, 0, err
	}
	for total > s.keep.MaxBytes {
		var rid, sid string
		var rcreated, supdated int64
		err := tx.QueryRowContext(ctx, s.q.oldestVisible).Scan(&rid, &rcreated)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return responses, streams, err
		}
		err = tx.QueryRowContext(ctx, s.q.oldestStream).Scan(&sid, &supdated)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return responses, streams, err
		}
		switch {
		case rid != "" && (sid == "" || supdated >= rcreated):
			if _, err := s.hide(ctx, tx, rid); err != nil {
				return responses, streams, err
			}
			responses++
			freed, err := s.collect(ctx, tx, rid)
			if err != nil {
				return responses, streams, err
			}
			total -= freed
		case sid != "":
			var n int64
			if err := tx.QueryRowContext(ctx, s.q.streamBytes, sid, sid).Scan(&n); err != nil {
				return responses, streams, err
			}
			if _, err := s.dropStream(ctx, tx, sid); err != nil {
				return responses, streams, err
			}
			streams++
			total -= n
		default:
			return responses, streams, nil
		}
	}
	return responses, streams, nil
}

func column[T any](ctx context.Context, tx *sql.Tx, q string, args ...any) ([]T, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Close implements store.Store.
func (s *Store) Close() error {
	return s.db.Close()
}
