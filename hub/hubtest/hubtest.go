// Package hubtest runs a fake Hugging Face Hub on loopback for tests: the
// parts of the Hub's API and file downloads that package hub uses, with
// their redirects, headers and range requests, and faults to order (a
// connection dropped mid-file, content that does not match its checksum).
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
)

// File is a file of the fake repository.
type File struct {
	// Path is its path in the repository ("model-Q4_K_M.gguf").
	Path string
	// Data is its content.
	Data []byte
	// LFS makes it a Large File Storage file: its download redirects to
	// the CDN, and its ETag is the SHA-256 of Data. Others are served by
	// the Hub itself with a git blob id as ETag.
	LFS bool
	// Served, when not nil, is what the download sends instead of Data
	// (the checksums still describe Data): a corrupted file.
	Served []byte
	// DropAfter, when positive, makes the first download of the file that
	// starts at byte 0 close the connection after that many bytes.
	DropAfter int64
}

// Commit is the fake repository's one commit.
const Commit = "0123456789abcdef0123456789abcdef01234567"

// Server is a fake Hub serving one repository, and its CDN: two loopback
// servers, so that the CDN is another host, as on the real Hub.
type Server struct {
	// URL is the Hub's address, for HF_ENDPOINT.
	URL string
	// Token, when set, is the Bearer token the API and resolve addresses
	// require (401 otherwise).
	Token string

	repo     string
	hub, cdn *httptest.Server
	mu       sync.Mutex
	files    map[string]*File
	order    []string
	dropped  map[string]bool
	requests []string
}

// New starts a fake Hub serving repo ("org/name") with files; Close stops it.
func New(repo string, files ...File) *Server {
	s := &Server{repo: repo, files: map[string]*File{}, dropped: map[string]bool{}}
	for i := range files {
		f := files[i]
		s.files[f.Path] = &f
		s.order = append(s.order, f.Path)
	}
	s.cdn = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	s.hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.URL = s.hub.URL
	return s
}

// Close stops the servers.
func (s *Server) Close() {
	s.hub.Close()
	s.cdn.Close()
}

// SHA256 is the hex SHA-256 of data, the ETag of an LFS file.
func SHA256(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// gitBlobID is git's id of a blob with data, the ETag of a file not in LFS.
func gitBlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// Requests returns the requests served so far, one line each:
// "HOST METHOD PATH" then " range=..." and " auth" where present, HOST
// being "hub" or "cdn".
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

func (s *Server) record(host string, r *http.Request) {
	line := host + " " + r.Method + " " + r.URL.Path
	if rg := r.Header.Get("Range"); rg != "" {
		line += " range=" + rg
	}
	if r.Header.Get("Authorization") != "" {
		line += " auth"
	}
	s.mu.Lock()
	s.requests = append(s.requests, line)
	s.mu.Unlock()
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.record("hub", r)
	if s.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.Token {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]string{"error": "Invalid username or password."})
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/api/models/"+s.repo+"/tree/"); ok && r.Method == http.MethodGet {
		if rest != "main" && rest != Commit {
			http.Error(w, `{"error":"Invalid rev id"}`, http.StatusNotFound)
			return
		}
		type lfs struct {
			Oid  string `json:"oid"`
			Size int    `json:"size"`
		}
		type entry struct {
			Type string `json:"type"`
			Oid  string `json:"oid"`
			Size int    `json:"size"`
			Path string `json:"path"`
			LFS  *lfs   `json:"lfs,omitempty"`
		}
		list := []entry{}
		for _, p := range s.order {
			f := s.files[p]
			e := entry{Type: "file", Oid: gitBlobID(f.Data), Size: len(f.Data), Path: f.Path}
			if f.LFS {
				e.LFS = &lfs{Oid: SHA256(f.Data), Size: len(f.Data)}
			}
			list = append(list, e)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(list)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/"+s.repo+"/resolve/")
	rev, name, _ := strings.Cut(rest, "/")
	f := s.files[name]
	if !ok || f == nil || (rev != "main" && rev != Commit) {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", Commit)
	if f.LFS {
		sum := SHA256(f.Data)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
		w.Header().Set("ETag", `"`+gitBlobID(f.Data)+`"`)
		w.Header().Set("Location", s.cdn.URL+"/repos/"+sum+"?name="+name)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitBlobID(f.Data)+`"`)
	s.serveContent(w, r, f)
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	s.record("cdn", r)
	f := s.files[r.URL.Query().Get("name")]
	if f == nil || !f.LFS || "/repos/"+SHA256(f.Data) != r.URL.Path {
		http.Error(w, "no such object", http.StatusNotFound)
		return
	}
	w.Header().Set("ETag", `"`+SHA256(f.Data)+`"`)
	s.serveContent(w, r, f)
}

// serveContent sends f's content, or the part a "bytes=N-" range asks
// for, dropping the connection where f says to.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, f *File) {
	data := f.Data
	if f.Served != nil {
		data = f.Served
	}
	start := int64(0)
	if rg := r.Header.Get("Range"); rg != "" {
		spec, ok := strings.CutPrefix(rg, "bytes=")
		from, _, _ := strings.Cut(spec, "-")
		n, err := strconv.ParseInt(from, 10, 64)
		if !ok || err != nil || n < 0 {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if n >= int64(len(data)) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
	}
	body := data[start:]
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Content-Type", "application/octet-stream")
	if r.Header.Get("Range") != "" {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if r.Method == http.MethodHead {
		return
	}
	s.mu.Lock()
	drop := f.DropAfter > 0 && start == 0 && !s.dropped[f.Path]
	if drop {
		s.dropped[f.Path] = true
	}
	s.mu.Unlock()
	if !drop || f.DropAfter >= int64(len(body)) {
		w.Write(body)
		return
	}
	w.Write(body[:f.DropAfter])
	w.(http.Flusher).Flush()
	// The connection dies mid-body: the client sees fewer bytes than
	// Content-Length promised.
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}
