// Package testserver starts real database servers for the tests of the
// shared stores: PostgreSQL and Redis, each on a free loopback port with
// its files in a temporary directory, stopped when the test ends. A test
// whose server binary is absent (or cannot run here) is skipped with a
// message that says what to install.
package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// freePort returns a loopback port nothing listens on just now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// stop ends cmd with sig and waits for it, killing it if it lingers.
func stop(cmd *exec.Cmd, sig os.Signal) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// Postgres is a PostgreSQL server of one test.
type Postgres struct {
	port int
	n    atomic.Int64
	dir  string
	args []string
	cred *syscall.Credential
	cmd  *exec.Cmd
}

// pgBin finds the directory of initdb and postgres: $RILL_PG_BIN, else the
// newest /usr/lib/postgresql/*/bin (Debian's layout), else $PATH.
func pgBin() string {
	if d := os.Getenv("RILL_PG_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// StartPostgres starts a PostgreSQL server (trust authentication, user
// postgres) for t and stops it when t ends. PostgreSQL refuses to run as
// root: as root, it runs the server as the user nobody. Durable false turns
// fsync off, which tests do not need (they crash the server, not the OS)
// and which makes them faster.
func StartPostgres(t testing.TB, durable bool) *Postgres {
	t.Helper()
	bin := pgBin()
	if bin == "" {
		t.Skip("PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin, $RILL_PG_BIN or $PATH): apt-get install postgresql")
	}
	var cred *syscall.Credential
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("running as root and no user nobody to run PostgreSQL as: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parent is private to root, and the server's
	// user must reach its files.
	dir, err := os.MkdirTemp("", "rill-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Skipf("initdb cannot make a cluster here: %v\n%s", err, out)
	}
	p := &Postgres{port: freePort(t), dir: dir, cred: cred}
	p.args = []string{filepath.Join(bin, "postgres"), "-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-k", dir,
		"-c", "max_connections=200", "-c", "shared_buffers=32MB"}
	if !durable {
		// A commit still writes its WAL before it returns (to the OS,
		// unsynced), so what was committed survives Crash; with
		// synchronous_commit=off it would not, and Reopen fails.
		p.args = append(p.args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	p.start(t)
	t.Cleanup(func() { stop(p.cmd, syscall.SIGINT) }) // fast shutdown
	return p
}

func (p *Postgres) start(t testing.TB) {
	t.Helper()
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	log, err := os.OpenFile(filepath.Join(p.dir, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := pgx.Connect(ctx, p.url("postgres"))
		if err == nil {
			c.Close(ctx)
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(p.dir, "log"))
			t.Fatalf("postgres did not accept connections in 30 s: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Crash stops the server as a crash would (SIGQUIT: immediate shutdown,
// no checkpoint; the next start recovers from the WAL) and starts it
// again on the same port and data.
func (p *Postgres) Crash(t testing.TB) {
	t.Helper()
	stop(p.cmd, syscall.SIGQUIT)
	p.start(t)
}

func (p *Postgres) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

// NewDatabase creates an empty database and returns its URL.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	name := fmt.Sprintf("t%d", p.n.Add(1))
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return p.url(name)
}

// Redis is a redis-server of one test.
type Redis struct {
	// Addr is its host:port.
	Addr string
	args []string
	dir  string
	cmd  *exec.Cmd
}

// RedisOptions configure StartRedis.
type RedisOptions struct {
	// AppendOnly turns the append-only file on (fsync every write), so
	// that what was written survives Crash.
	AppendOnly bool
	// Args are more arguments of redis-server ("--maxmemory-policy",
	// "allkeys-lru").
	Args []string
}

// StartRedis starts a redis-server for t and stops it when t ends.
func StartRedis(t testing.TB, o RedisOptions) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed: apt-get install redis-server")
	}
	r := &Redis{dir: t.TempDir()}
	port := freePort(t)
	r.Addr = "127.0.0.1:" + strconv.Itoa(port)
	r.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--dir", r.dir,
		"--daemonize", "no", "--logfile", filepath.Join(r.dir, "log")}
	if o.AppendOnly {
		r.args = append(r.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		r.args = append(r.args, "--appendonly", "no")
	}
	r.args = append(append([]string{bin}, r.args...), o.Args...)
	r.start(t)
	t.Cleanup(func() { stop(r.cmd, syscall.SIGTERM) })
	return r
}

func (r *Redis) start(t testing.TB) {
	t.Helper()
	r.cmd = exec.Command(r.args[0], r.args[1:]...)
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(r.dir, "log"))
			t.Fatalf("redis-server did not answer in 20 s: %v\n%s", err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Crash kills the server (SIGKILL: no shutdown, nothing more written)
// and starts it again on the same port and directory.
func (r *Redis) Crash(t testing.TB) {
	t.Helper()
	stop(r.cmd, syscall.SIGKILL)
	r.start(t)
}

// URL is the server's redis:// URL for database db.
func (r *Redis) URL(db int) string {
	return "redis://" + r.Addr + "/" + strconv.Itoa(db)
}
