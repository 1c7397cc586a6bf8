package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrChecksum is the error (wrapped) of a download whose content is not
// what the Hub published: its partial file has been deleted.
var ErrChecksum = errors.New("checksum mismatch")

// Result is where a pulled model lies.
type Result struct {
	// Path is the file to open: the model's GGUF, or the first part of a
	// split GGUF (the others lie beside it).
	Path string
	// Files are all the files pulled, Path first.
	Files []string
	// Commit is the repository commit the files are of.
	Commit string
}

// Pull resolves ref and makes sure its files are in the cache, downloading
// what is missing (resuming a partial download), and returns their paths.
// Offline, it resolves from the cache alone; online, a Hub that cannot be
// reached falls back to the cache too, with a warning.
func Pull(ctx context.Context, ref Ref, opts Options) (*Result, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.Offline {
		r, err := fromCache(o.CacheDir, ref, o.Revision)
		if err != nil {
			return nil, fmt.Errorf("offline (HF_HUB_OFFLINE): %w", err)
		}
		o.Logger.Info("hub: offline, using the cache", slog.String("model", ref.String()), slog.String("path", r.Path))
		return r, nil
	}
	p := &puller{o: o, ref: ref, dir: repoDir(o.CacheDir, ref.Repo)}
	files, err := p.list(ctx)
	if err != nil {
		if _, ok := errors.AsType[*url.Error](err); ok && ctx.Err() == nil {
			if r, cerr := fromCache(o.CacheDir, ref, o.Revision); cerr == nil {
				o.Logger.Warn("hub: unreachable, using the cache", slog.String("model", ref.String()),
					slog.String("commit", r.Commit), slog.Any("err", err))
				return r, nil
			}
		}
		return nil, err
	}
	picked, err := pick(files, ref.Quant)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	// The first file's answer fixes the commit; the other parts are asked
	// for at that commit, so that a push in between cannot mix them.
	revision, commit := o.Revision, ""
	for _, name := range picked {
		m, err := p.meta(ctx, revision, name)
		if err != nil {
			return nil, err
		}
		if commit == "" {
			commit, revision = m.commit, m.commit
		}
		if err := p.fetch(ctx, name, m); err != nil {
			if o.Progress != nil {
				o.Progress.Done(name, err)
			}
			return nil, err
		}
		if o.Progress != nil {
			o.Progress.Done(name, nil)
		}
		if err := link(p.dir, commit, name, m.etag); err != nil {
			return nil, fmt.Errorf("hub cache: %w", err)
		}
	}
	if err := writeRef(p.dir, o.Revision, commit); err != nil {
		return nil, fmt.Errorf("hub cache: %w", err)
	}
	return result(filepath.Join(p.dir, "snapshots", commit), commit, picked), nil
}

// puller is one Pull's state.
type puller struct {
	o   Options
	ref Ref
	dir string // the repository's cache folder
}

// request makes a request to u, with the token when u is on the endpoint's
// host: a download redirected to a CDN does not get it.
func (p *puller) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "rill")
	if ep, err := url.Parse(p.o.Endpoint); err == nil && p.o.Token != "" && ep.Host == req.URL.Host {
		req.Header.Set("Authorization", "Bearer "+p.o.Token)
	}
	return req, nil
}

// statusError explains an API answer that is not a success: the Hub's own
// message where it sent one, and what to do about 401 and 404.
func (p *puller) statusError(what string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var msg struct {
		Error string `json:"error"`
	}
	detail := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &msg) == nil && msg.Error != "" {
		detail = msg.Error
	}
	hint := ""
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		hint = "; the repository may be private or gated: set HF_TOKEN to a token that may read it"
		if p.o.Token != "" {
			hint = "; HF_TOKEN was sent and refused"
		}
	case http.StatusNotFound:
		hint = "; check the repository name"
		if p.o.Token == "" {
			hint += " (a private repository needs HF_TOKEN)"
		}
	}
	if detail != "" {
		detail = ": " + detail
	}
	return fmt.Errorf("hub %s: %s%s%s", what, resp.Status, detail, hint)
}

// list returns the paths of the repository's files at the revision, from
// the tree API (following its pages).
func (p *puller) list(ctx context.Context) ([]string, error) {
	u := fmt.Sprintf("%s/api/models/%s/tree/%s?recursive=true", p.o.Endpoint, p.ref.Repo, url.PathEscape(p.o.Revision))
	var files []string
	for u != "" {
		req, err := p.request(ctx, http.MethodGet, u)
		if err != nil {
			return nil, err
		}
		resp, err := p.o.HTTP.Do(req)
		if err != nil {
			return nil, fmt.Errorf("hub: listing %s: %w", p.ref.Repo, err)
		}
		if resp.StatusCode != http.StatusOK {
			err := p.statusError("listing "+p.ref.Repo, resp)
			resp.Body.Close()
			return nil, err
		}
		var entries []struct {
			Type string `json:"type"`
			Path string `json:"path"`
		}
		err = json.NewDecoder(resp.Body).Decode(&entries)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("hub: listing %s: %w", p.ref.Repo, err)
		}
		for _, e := range entries {
			if e.Type == "file" && safeRepoPath(e.Path) {
				files = append(files, e.Path)
			}
		}
		u = nextPage(resp.Header.Get("Link"))
	}
	return files, nil
}

// nextPage returns the rel="next" address of a Link header, or "".
func nextPage(link string) string {
	for part := range strings.SplitSeq(link, ",") {
		target, params, ok := strings.Cut(part, ";")
		if ok && strings.Contains(params, `rel="next"`) {
			return strings.Trim(strings.TrimSpace(target), "<>")
		}
	}
	return ""
}

// fileMeta is what the Hub says of a file before its download.
type fileMeta struct {
	commit string
	etag   string // the blob's name; the SHA-256 of an LFS file
	size   int64  // -1 if unknown
	url    string // where the content is (a CDN for LFS files)
}

// meta asks the Hub for a file's commit, ETag and size: a HEAD of its
// resolve address, the redirect not followed, for the headers that go with
// it (X-Linked-Etag and X-Linked-Size describe the LFS content behind the
// redirect). A relative redirect (a renamed repository) is followed.
func (p *puller) meta(ctx context.Context, revision, name string) (fileMeta, error) {
	u := fmt.Sprintf("%s/%s/resolve/%s/%s", p.o.Endpoint, p.ref.Repo, url.PathEscape(revision), escapePath(name))
	noRedirect := *p.o.HTTP
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for range 5 {
		req, err := p.request(ctx, http.MethodHead, u)
		if err != nil {
			return fileMeta{}, err
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			return fileMeta{}, fmt.Errorf("hub: %s: %w", name, err)
		}
		resp.Body.Close()
		h := resp.Header
		redirect := resp.StatusCode >= 300 && resp.StatusCode < 400
		if !redirect && resp.StatusCode != http.StatusOK {
			return fileMeta{}, p.statusError(name, resp)
		}
		loc, err := resp.Location()
		if redirect && err != nil {
			return fileMeta{}, fmt.Errorf("hub: %s: redirect without a location", name)
		}
		if redirect && h.Get("X-Repo-Commit") == "" {
			u = loc.String() // the repository moved: ask its new address
			continue
		}
		m := fileMeta{commit: h.Get("X-Repo-Commit"), etag: etagOf(h), size: sizeOf(h), url: u}
		if redirect {
			m.url = loc.String()
		}
		if !commitID.MatchString(m.commit) {
			return fileMeta{}, fmt.Errorf("hub: %s: the answer has no commit (X-Repo-Commit %q)", name, m.commit)
		}
		if !blobID.MatchString(m.etag) {
			return fileMeta{}, fmt.Errorf("hub: %s: the answer has no usable ETag (%q)", name, m.etag)
		}
		return m, nil
	}
	return fileMeta{}, fmt.Errorf("hub: %s: too many redirects", name)
}

// escapePath escapes each segment of a repository path.
func escapePath(p string) string {
	seg := strings.Split(p, "/")
	for i, s := range seg {
		seg[i] = url.PathEscape(s)
	}
	return strings.Join(seg, "/")
}

// etagOf is the file's ETag: the LFS content's (X-Linked-Etag) before the
// answer's own, without quotes or weakness mark.
func etagOf(h http.Header) string {
	e := h.Get("X-Linked-Etag")
	if e == "" {
		e = h.Get("ETag")
	}
	return strings.ToLower(strings.Trim(strings.TrimPrefix(e, "W/"), `"`))
}

// sizeOf is the file's size in bytes, -1 if the answer does not say.
func sizeOf(h http.Header) int64 {
	for _, k := range []string{"X-Linked-Size", "Content-Length"} {
		if n, err := strconv.ParseInt(h.Get(k), 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// fetch makes sure blob m.etag is in the cache: a blob already there is
// kept; else the download goes to blobs/ETAG.incomplete, resuming from
// what that file holds (Range), and again after a connection that breaks
// off, up to Retries times; the content is checked (size, and SHA-256 for
// an LFS file) before it is renamed to blobs/ETAG.
func (p *puller) fetch(ctx context.Context, name string, m fileMeta) error {
	blobs := filepath.Join(p.dir, "blobs")
	blob := filepath.Join(blobs, m.etag)
	if st, err := os.Stat(blob); err == nil && st.Mode().IsRegular() && (m.size < 0 || st.Size() == m.size) {
		p.o.Logger.Info("hub: in the cache", slog.String("file", name), slog.String("path", blob))
		return nil
	}
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	partial := blob + ".incomplete"
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	defer f.Close()
	// What an earlier attempt left is hashed first: the new bytes follow.
	sum := sha256.New()
	have, err := io.Copy(sum, f)
	if err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if m.size >= 0 && have > m.size {
		if have, err = restart(f, sum); err != nil {
			return err
		}
	}
	if have > 0 {
		p.o.Logger.Info("hub: resuming a partial download", slog.String("file", name),
			slog.Int64("have", have), slog.Int64("size", m.size))
	} else {
		p.o.Logger.Info("hub: downloading", slog.String("file", name), slog.Int64("size", m.size))
	}
	for attempt := 0; m.size < 0 || have < m.size; attempt++ {
		done, err := p.download(ctx, f, sum, &have, name, m)
		if done {
			break
		}
		if err == nil {
			continue
		}
		if _, ok := errors.AsType[permanent](err); ok || ctx.Err() != nil || attempt >= p.o.Retries {
			return fmt.Errorf("hub: downloading %s (%d of %d bytes are kept for the next try): %w", name, have, m.size, err)
		}
		p.o.Logger.Warn("hub: download broke off, resuming", slog.String("file", name),
			slog.Int64("have", have), slog.Any("err", err))
	}
	if m.size >= 0 && have != m.size {
		return fmt.Errorf("hub: downloading %s: got %d bytes, the Hub said %d", name, have, m.size)
	}
	if sha256ID.MatchString(m.etag) {
		if got := hex.EncodeToString(sum.Sum(nil)); got != m.etag {
			f.Close()
			rmErr := os.Remove(partial)
			return errors.Join(fmt.Errorf("hub: %s: %w: its SHA-256 is %s, the Hub publishes %s; the partial download %s was deleted",
				name, ErrChecksum, got, m.etag, partial), rmErr)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if err := os.Rename(partial, blob); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	return nil
}

// restart empties the partial file f and its hash.
func restart(f *os.File, sum hash.Hash) (int64, error) {
	sum.Reset()
	if err := f.Truncate(0); err != nil {
		return 0, fmt.Errorf("hub cache: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("hub cache: %w", err)
	}
	return 0, nil
}

// download runs one GET of m's content from byte *have on, appending to f
// and sum and advancing *have. done reports that the content is complete
// (the server said so, or the body ended where the size is unknown); an
// error with done false may be retried.
func (p *puller) download(ctx context.Context, f *os.File, sum hash.Hash, have *int64, name string, m fileMeta) (done bool, err error) {
	req, err := p.request(ctx, http.MethodGet, m.url)
	if err != nil {
		return false, err
	}
	if *have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", *have))
	}
	resp, err := p.o.HTTP.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != *have {
			return false, fmt.Errorf("the server resumed at %q, not at byte %d", resp.Header.Get("Content-Range"), *have)
		}
	case http.StatusOK:
		if *have > 0 { // no range support: from the start
			p.o.Logger.Info("hub: the server does not resume; downloading from the start", slog.String("file", name))
			if *have, err = restart(f, sum); err != nil {
				return false, err
			}
		}
	case http.StatusRequestedRangeNotSatisfiable:
		if m.size >= 0 && *have == m.size {
			return true, nil
		}
		*have, err = restart(f, sum)
		return false, err
	default:
		err := p.statusError("downloading "+name, resp)
		if resp.StatusCode < 500 {
			return false, permanent{err}
		}
		return false, err
	}
	w := &counter{w: io.MultiWriter(f, sum), n: have, file: name, total: m.size, progress: p.o.Progress}
	if _, err := io.Copy(w, resp.Body); err != nil {
		if _, ok := errors.AsType[writeError](err); ok {
			return false, permanent{err}
		}
		return false, err
	}
	return m.size < 0, nil
}

// permanent marks a download error that a retry would not mend.
type permanent struct{ error }

func (e permanent) Unwrap() error { return e.error }

// writeError is a failure to write the partial file, as opposed to one
// reading the body.
type writeError struct{ error }

func (e writeError) Unwrap() error { return e.error }

// counter writes to w, counting into *n and telling progress.
type counter struct {
	w        io.Writer
	n        *int64
	file     string
	total    int64
	progress Progress
}

func (c *counter) Write(b []byte) (int, error) {
	k, err := c.w.Write(b)
	*c.n += int64(k)
	if c.progress != nil {
		c.progress.Update(c.file, *c.n, c.total)
	}
	if err != nil {
		return k, writeError{err}
	}
	return k, nil
}

// rangeStart reads the first byte of "bytes START-END/TOTAL".
func rangeStart(cr string) (int64, bool) {
	s, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(s, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(start, 10, 64)
	return n, err == nil
}
