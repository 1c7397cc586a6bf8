package service

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// browserPolicy is the server's one rule for requests from browser pages,
// which an API key alone does not cover (a server without one, a page that
// got hold of one):
//
//   - Host check (hostCheck on): the host of the Host header (port aside)
//     must be a loopback IP literal, "localhost" or a name under
//     ".localhost", or match one of hosts. A page on another site that has
//     its own name resolve to 127.0.0.1 (DNS rebinding) addresses the
//     server under that name, and is refused. serve turns it on when it
//     listens on a loopback address, as Jupyter does, or when
//     --allowed-hosts is given.
//   - Origin check: a request with an Origin header comes from a page. It is
//     served only when that origin is the server's own (the Origin's
//     host:port is the Host the request addressed, and that Host passes the
//     Host check) or matches one of origins. Clients that send no Origin
//     (curl, SDKs, servers) are not affected, whatever their Content-Type:
//     the check is about pages, and pages always send Origin on the
//     requests that could do harm (POST, WebSocket handshakes). The scheme
//     is not compared for the own origin, so that a page served over https
//     by a TLS proxy in front of the server counts as its own.
//
// origins holds host patterns from every flag that allows other origins
// (--ws-allowed-origins, and CORS's once it exists): path.Match patterns
// matched case-insensitively against the Origin's host ("*.example.com"),
// or against "scheme://host" when the pattern contains "://". It is built
// once by New and read-only after.
type browserPolicy struct {
	origins   []string
	hostCheck bool
	hosts     []string // lower case
}

// newBrowserPolicy keeps the valid patterns of origins and hosts; invalid
// ones are logged and ignored (serve has checked them already).
func newBrowserPolicy(log *slog.Logger, hostCheck bool, hosts []string, origins ...[]string) *browserPolicy {
	p := &browserPolicy{hostCheck: hostCheck}
	for _, list := range origins {
		for _, o := range list {
			if err := checkOriginPattern(o); err != nil {
				log.Warn("ignoring origin pattern", slog.String("pattern", o), slog.Any("err", err))
				continue
			}
			p.origins = append(p.origins, strings.ToLower(o))
		}
	}
	for _, h := range hosts {
		if err := checkOriginPattern(h); err != nil {
			log.Warn("ignoring host pattern", slog.String("pattern", h), slog.Any("err", err))
			continue
		}
		p.hosts = append(p.hosts, strings.ToLower(h))
	}
	return p
}

// check returns the error that refuses r, or nil.
func (p *browserPolicy) check(r *http.Request) *apiError {
	if !p.hostAllowed(r.Host) {
		return &apiError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "host_not_allowed",
			Message: fmt.Sprintf("Host %q is not a name this server answers to; its operator can allow it with --allowed-hosts.",
				clip(r.Host, maxEchoBytes))}
	}
	if !p.originAllowed(r) {
		return &apiError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "origin_not_allowed",
			Message: fmt.Sprintf("Pages of origin %q may not use this server; its operator can allow them with --ws-allowed-origins.",
				clip(r.Header.Get("Origin"), maxEchoBytes))}
	}
	return nil
}

// hostAllowed applies the Host check to hostport, a Host header.
func (p *browserPolicy) hostAllowed(hostport string) bool {
	if !p.hostCheck {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for _, pat := range p.hosts {
		if ok, _ := path.Match(pat, host); ok {
			return true
		}
	}
	return false
}

// originAllowed applies the Origin check to r.
func (p *browserPolicy) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return false // "null" (sandboxed frames, file: pages), or garbage
	}
	if strings.EqualFold(u.Host, r.Host) && p.hostAllowed(r.Host) {
		return true
	}
	host := strings.ToLower(u.Host)
	withScheme := strings.ToLower(u.Scheme) + "://" + host
	for _, pat := range p.origins {
		target := host
		if strings.Contains(pat, "://") {
			target = withScheme
		}
		if ok, _ := path.Match(pat, target); ok {
			return true
		}
	}
	return false
}

// ParseOriginPatterns splits a comma-separated list of origin or host
// patterns (Options.AllowedOrigins, Options.AllowedHosts) and checks each;
// empty items are dropped.
func ParseOriginPatterns(list string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := checkOriginPattern(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func checkOriginPattern(p string) error {
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("pattern %q: %w", p, err)
	}
	return nil
}
