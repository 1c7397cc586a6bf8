package service

import (
	"embed"
	"net/http"
	"strconv"
	"strings"
)

// The built-in web page (GET /): pick a model, chat over SSE or WebSocket,
// watch tokens arrive, stop a stream, read each answer's usage and the
// server's figures from /metrics. Plain HTML, CSS and JavaScript embedded
// in the binary: no build step, nothing fetched from elsewhere. The page is
// public (it holds no secret); the API calls it makes need the key, which
// the user types in and the page keeps in memory only.

//go:embed web/index.html web/app.js web/style.css
var webFiles embed.FS

// pageFile is one embedded file and its content type.
type pageFile struct {
	name        string
	contentType string
}

var pageFiles = map[string]pageFile{
	"/":               {"web/index.html", "text/html; charset=utf-8"},
	"/page/app.js":    {"web/app.js", "text/javascript; charset=utf-8"},
	"/page/style.css": {"web/style.css", "text/css; charset=utf-8"},
}

// pageCSP lets the page load only its own files and talk only to its own
// origin ('self' covers ws: and wss: to the same host); the favicon is an
// empty data: URL, so that no request for it fails.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func isPagePath(path string) bool {
	_, ok := pageFiles[path]
	return ok || strings.HasPrefix(path, "/page/")
}

func (s *Server) handlePage(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	f, ok := pageFiles[r.URL.Path]
	if !ok {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "unknown_url",
			Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")."})
		return
	}
	data, err := webFiles.ReadFile(f.name)
	if err != nil {
		panic("service: embedded page file " + f.name + ": " + err.Error())
	}
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if f.name == "web/index.html" {
		h.Set("Content-Security-Policy", pageCSP)
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(data)
	}
}
