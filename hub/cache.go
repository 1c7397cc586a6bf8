package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// The cache layout is huggingface_hub's, so that its tools, llama.cpp and
// rill share the files:
//
//	CACHE/models--ORG--NAME/blobs/ETAG              a file's content
//	CACHE/models--ORG--NAME/blobs/ETAG.incomplete   a download in progress
//	CACHE/models--ORG--NAME/snapshots/COMMIT/PATH   symlink to ../../blobs/ETAG
//	CACHE/models--ORG--NAME/refs/REVISION           the commit REVISION was at
//
// A Large File Storage file's ETag is the SHA-256 of its content.

var (
	commitID = regexp.MustCompile(`^[0-9a-f]{40}$`)
	// blobID is a git blob id (SHA-1) or an LFS object id (SHA-256).
	blobID   = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)
	sha256ID = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// repoDir is the cache folder of repo ("org/name").
func repoDir(cache, repo string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// safeRepoPath reports whether p, a path in a repository as the Hub lists
// it, stays inside the snapshot folder it is joined to.
func safeRepoPath(p string) bool {
	return p != "" && !strings.HasPrefix(p, "/") && !strings.Contains(p, `\`) &&
		path.Clean(p) == p && p != "." && !strings.HasPrefix(p, "../") && p != ".."
}

// readRef returns the commit the cache has for revision: revision itself
// when it is a commit, else what refs/REVISION holds.
func readRef(dir, revision string) (string, error) {
	if commitID.MatchString(revision) {
		return revision, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(revision)))
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(data))
	if !commitID.MatchString(commit) {
		return "", fmt.Errorf("refs/%s holds %q, not a commit", revision, commit)
	}
	return commit, nil
}

// snapshotFiles lists the files (paths with '/') present in a snapshot
// folder; a link whose blob is gone is left out.
func snapshotFiles(snap string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(snap, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	return files, err
}

// fromCache resolves ref without the network: the files of the commit the
// cache records for revision.
func fromCache(cache string, ref Ref, revision string) (*Result, error) {
	dir := repoDir(cache, ref.Repo)
	commit, err := readRef(dir, revision)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is not in the hub cache %s", ref.Repo, cache)
	}
	if err != nil {
		return nil, fmt.Errorf("hub cache %s: %w", dir, err)
	}
	snap := filepath.Join(dir, "snapshots", commit)
	files, err := snapshotFiles(snap)
	if err != nil {
		return nil, fmt.Errorf("hub cache %s: %w", snap, err)
	}
	picked, err := pick(files, ref.Quant)
	if err != nil {
		return nil, fmt.Errorf("%s in the hub cache (commit %s): %w", ref, commit, err)
	}
	return result(snap, commit, picked), nil
}

// result is Result for files of the snapshot folder snap.
func result(snap, commit string, files []string) *Result {
	r := &Result{Commit: commit}
	for _, f := range files {
		r.Files = append(r.Files, filepath.Join(snap, filepath.FromSlash(f)))
	}
	r.Path = r.Files[0]
	return r
}

// link points the snapshot's file name (a repository path) at blob
// etag, replacing what was there in one step: a link made under a
// temporary name is renamed over it.
func link(dir, commit, name, etag string) error {
	p := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	// From snapshots/COMMIT/a/b/file up to the repo folder: one ".." per
	// folder below the repo folder.
	up := strings.Repeat("../", 2+strings.Count(name, "/"))
	tmp := p + ".tmp-link"
	os.Remove(tmp)
	if err := os.Symlink(up+"blobs/"+etag, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeRef records that revision is at commit, replacing the file in one
// step.
func writeRef(dir, revision, commit string) error {
	if commitID.MatchString(revision) {
		return nil // a commit is its own ref
	}
	p := filepath.Join(dir, "refs", filepath.FromSlash(revision))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
