package app

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"rill/config"
	"rill/internal/buildinfo"
	"rill/internal/park"
	"rill/service"
)

// Serve runs `rill serve` with its command-line arguments args: the
// OpenAI-compatible server, until ctx ends (the caller cancels it on SIGINT
// and SIGTERM); then it stops accepting connections and lets streams in
// flight finish for up to --shutdown-grace before cancelling them. It
// returns flag.ErrHelp after printing the usage for -h.
func Serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	flagModel := config.Model{Native: &config.Native{}}
	flagModel.RegisterNativeFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	apiKey := fs.String("api-key", os.Getenv("RILL_API_KEY"), "require this Bearer key on /v1 (default $RILL_API_KEY)")
	keysFile := fs.String("api-keys-file", "", "YAML file of further API keys, each with a name and optional limits (requests_per_minute, tokens_per_minute, max_concurrent_streams) and a default priority; reloaded on SIGHUP")
	grace := fs.Duration("shutdown-grace", 30*time.Second, "how long running streams may finish after a shutdown signal")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	configFile := fs.String("config", "", "configuration file (YAML or JSON) of the models to serve, native and upstream; replaces the model flags")
	wsOrigins := fs.String("ws-allowed-origins", "", "comma-separated host patterns (e.g. *.example.com, https://app.example.com) of browser pages on other origins that may use the server (open a WebSocket, send requests)")
	allowedHosts := fs.String("allowed-hosts", "", "comma-separated host name patterns (e.g. rill.internal, *.example.com) clients may address the server by, besides localhost and loopback IPs; checked (against DNS rebinding) when listening on loopback or when given")
	readTimeout := fs.Duration("read-timeout", service.DefaultReadTimeout, "how long a request body may take to arrive after its headers (408 after that); 0 turns the limit off")
	resumeGrace := fs.Duration("resume-grace", service.DefaultResumeGrace, "how long a resumable stream (stream_options.resumable) whose client is gone keeps generating, waiting for a reconnect, before it stops; 0 stops it at once")
	writeIdle := fs.Duration("write-idle-timeout", service.DefaultWriteIdleTimeout, "how long a write to a client may make no progress before its request (or WebSocket connection) is ended and its engine work cancelled; 0 turns the limit off")
	maxChoices := fs.Int("max-choices", service.DefaultMaxChoices, "most choices (prompts × n) one request may ask for")
	corsOrigins := fs.String("cors-allowed-origins", "", "comma-separated origin patterns (as --ws-allowed-origins) of browser pages on other origins that may call the HTTP API (CORS); they may open a WebSocket too")
	responsesStore := fs.Int("responses-store", service.DefaultResponsesStore, "how many Responses API responses the store keeps for previous_response_id and GET /v1/responses/{id} (least recently stored hidden first; 0 keeps none and turns off background responses and resumable streams)")
	storeFlags := registerStoreFlags(fs)
	metricsAddr := fs.String("metrics-addr", "", "also serve GET /metrics on this address, without the API key (e.g. 127.0.0.1:9464 for a Prometheus on this host); /metrics on --addr is behind the API key")
	otlpEndpoint := fs.String("otlp-endpoint", "", "export OpenTelemetry traces over OTLP/HTTP to this receiver's base URL (e.g. http://localhost:4318; traces go to its /v1/traces); default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT when set, else no tracing")
	var cat config.Catalog
	fs.StringVar(&cat.ModelsDir, "models-dir", "", "folder of GGUF models to serve by file name (a split GGUF as one), each loaded when a request first names it, with the native flags' settings; --model's model is then loaded at start and never unloaded")
	fs.IntVar(&cat.MaxLoaded, "models-max-loaded", 0, "most native models loaded at once; loading another unloads the least recently used (not pinned) first (default 0: no cap; any --models-* flag loads native models on demand)")
	modelsTTL := fs.Duration("models-ttl", 0, "unload a native model idle this long (default 0: never; a configured model's ttl overrides it)")
	fs.Var(&cat.Memory, "models-memory", "memory budget of the loaded native models, each counted as its GGUF files plus its --kv-cache-mem: bytes, or a size such as 16GiB; loading past it unloads the least recently used first (default: none)")
	unloadGrace := fs.Duration("models-unload-grace", 0, "how long an unload lets the model's streams finish before it cuts them with a retryable 503 (default 0: 30s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cat.TTL = config.Duration(*modelsTTL)
	cat.UnloadGrace = config.Duration(*unloadGrace)
	if cat.MaxLoaded < 0 || cat.TTL < 0 || cat.UnloadGrace < 0 {
		return errors.New("--models-max-loaded, --models-ttl and --models-unload-grace must not be negative")
	}
	if *responsesStore < 0 {
		return fmt.Errorf("--responses-store %d: want 0 (keep none) or more", *responsesStore)
	}
	log, err := newLogger(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	// The first line says which build this is, so that a log read later
	// (or a bug report) names the code that wrote it.
	info := buildinfo.Read()
	log.Info("rill starting", slog.String("version", info.Version), slog.String("revision", info.Revision),
		slog.Bool("modified", info.Modified), slog.String("go_version", info.GoVersion),
		slog.String("platform", info.OS+"/"+info.Arch))
	origins, err := service.ParseOriginPatterns(*wsOrigins)
	if err != nil {
		return fmt.Errorf("--ws-allowed-origins: %w", err)
	}
	cors, err := service.ParseOriginPatterns(*corsOrigins)
	if err != nil {
		return fmt.Errorf("--cors-allowed-origins: %w", err)
	}
	hosts, err := service.ParseOriginPatterns(*allowedHosts)
	if err != nil {
		return fmt.Errorf("--allowed-hosts: %w", err)
	}
	if *maxChoices < 1 {
		return fmt.Errorf("--max-choices %d: want at least 1", *maxChoices)
	}
	st, closeStore, err := openServeStore(ctx, fs, storeFlags, *configFile, *responsesStore, log)
	if err != nil {
		return err
	}
	defer closeStore() // after the engines' close below: the last to go
	tr, err := newTracing(ctx, *otlpEndpoint, environ, info.Version)
	if err != nil {
		return err
	}
	// Deferred after the store's close, so run before it: after the server
	// and the engines, whose last spans it exports.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), traceFlushWait)
		defer cancel()
		tr.shutdown(sctx, log)
	}()
	if tr.on() {
		log.Info("exporting traces over OTLP/HTTP", slog.String("endpoint", tr.endpoint))
	}
	var keyRing service.KeyRing
	if *keysFile != "" {
		set, err := openKeys(*keysFile, log)
		if err != nil {
			return fmt.Errorf("--api-keys-file: %w", err)
		}
		keyRing = set
		defer watchKeys(*keysFile, set, log)()
	}
	auth := *apiKey != "" || keyRing != nil
	var e *Engines
	if *configFile != "" {
		native := config.NativeFlagNames()
		var set []string
		fs.Visit(func(f *flag.Flag) {
			if native[f.Name] {
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			return fmt.Errorf("--config and %s exclude each other: set them in the file", strings.Join(set, ", "))
		}
		if e, err = openConfig(ctx, *configFile, cat, log); err != nil {
			return err
		}
	} else if cat.On() {
		if e, err = openFlagsCatalog(ctx, fs, &flagModel, cat, log); err != nil {
			return err
		}
	} else if e, err = openFlags(ctx, &flagModel, log); err != nil {
		return err
	}
	// The engines' loops run until the server is done with them; they are
	// stopped and waited for before the engines are closed.
	runCtx, stopEngines := context.WithCancel(context.Background())
	waitEngines := e.Run(runCtx, log)
	defer func() {
		stopEngines()
		waitEngines()
		e.Close()
	}()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// Idle connections wait in one epoll set, not on a goroutine each:
	// keep-alive connections between requests (the Listener takes them
	// from net/http) and detached SSE streams' (service.Options.Poller).
	poller, err := park.NewPoller()
	var connState func(net.Conn, http.ConnState)
	if err != nil {
		log.Debug("idle connections keep a goroutine each", slog.Any("err", err))
		poller = nil
	} else {
		defer poller.Close()
		pl := park.NewListener(ln, poller, park.ListenerOptions{})
		ln, connState = pl, pl.ConnState
	}
	// Requests' contexts derive from base; cancelling it with
	// service.ErrShutdown cuts streams that outlive the grace period.
	base, cancelBase := context.WithCancelCause(context.Background())
	defer cancelBase(nil)
	api := service.New(service.Options{
		Engine: e, APIKey: *apiKey, Keys: keyRing, Logger: log,
		AllowedOrigins:     origins,
		CORSAllowedOrigins: cors,
		// DNS rebinding is a loopback server's problem (a page's own name
		// made to point at 127.0.0.1): check Host there, as Jupyter does,
		// and wherever the operator lists the names.
		HostCheck:        isLoopback(ln.Addr()) || len(hosts) > 0,
		AllowedHosts:     hosts,
		ReadTimeout:      flagTimeout(*readTimeout),
		WriteIdleTimeout: flagTimeout(*writeIdle),
		MaxChoices:       *maxChoices,
		ResponsesStore:   cmp.Or(*responsesStore, -1),
		Store:            serveStore(st, *responsesStore),
		TracerProvider:   tr.tracerProvider(),
		// Cancelling base cuts what still runs; WebSocket connections,
		// served apart from their handshakes, hear it here.
		Shutdown:    base.Done(),
		ResumeGrace: flagTimeout(*resumeGrace),
		Poller:      poller,
	})
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnState:         connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if ms := e.Models(); len(ms) == 1 {
		log.Info("listening", slog.String("addr", ln.Addr().String()), slog.String("model", ms[0].ID),
			slog.Int("context_length", ms[0].ContextLength), slog.Bool("auth", auth))
	} else {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		log.Info("listening", slog.String("addr", ln.Addr().String()), slog.Any("models", ids),
			slog.Bool("auth", auth))
	}

	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, api.MetricsHandler(), log)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown(log, srv, api, cancelBase, *grace)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// closeWait bounds the last phase of a shutdown: cut requests writing
// their last event, and WebSocket close handshakes (the library gives a
// peer 5 s to answer a close frame).
const closeWait = 10 * time.Second

// traceFlushWait bounds the export of the last spans at exit.
const traceFlushWait = 5 * time.Second

// shutdown stops srv and api in the order service's drain.go describes:
// new work is refused at once, HTTP streams and WebSocket requests in
// flight get the grace period to finish, what is left is cut (each told
// with a 503) and WebSocket connections closed with 1001, and shutdown
// waits, bounded, for all of that to reach the clients before the caller
// closes the engine.
func shutdown(log *slog.Logger, srv *http.Server, api *service.Server, cancelBase context.CancelCauseFunc, grace time.Duration) {
	log.Info("shutting down: waiting for running streams", slog.Duration("grace", grace))
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- api.Drain(gctx) }()
	err := srv.Shutdown(gctx)
	if derr := <-drained; err == nil {
		err = derr
	}
	if err != nil {
		log.Warn("grace period over: cutting running streams", slog.Any("err", err))
	}
	cancelBase(service.ErrShutdown)
	cctx, cancelClose := context.WithTimeout(context.Background(), closeWait)
	defer cancelClose()
	// Shutdown again: it waits for the handlers just cut to end.
	if err := srv.Shutdown(cctx); err != nil {
		log.Warn("streams still running after being cut", slog.Any("err", err))
	}
	if err := api.WaitConnections(cctx); err != nil {
		log.Warn("WebSocket connections still closing", slog.Any("err", err))
	}
	srv.Close()
}

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// flagTimeout maps a timeout flag to its Options field: 0 (off) is
// negative there, where zero means the default.
func flagTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// newLogger logs to w in format (text or json) from level on.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q (want text or json)", format)
}

// serveMetrics serves GET /metrics with h on its own listener at addr,
// until stop, which closes it and waits for its goroutine.
func serveMetrics(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener failed", slog.Any("err", err))
		}
	}()
	log.Info("serving metrics", slog.String("addr", ln.Addr().String()), slog.String("path", "/metrics"))
	return func() { srv.Close(); <-done }, nil
}

// openFlagsCatalog opens serve's catalogue of native models from its
// flags: the models of --models-dir, with the native flags' settings, and
// --model's model when the flag is given, pinned (loaded at start, as
// without a catalogue).
func openFlagsCatalog(ctx context.Context, fs *flag.FlagSet, m *config.Model, cat config.Catalog, log *slog.Logger) (*Engines, error) {
	if err := m.CheckNativeFlags(); err != nil {
		return nil, err
	}
	f := &config.File{Catalog: cat}
	given := false
	fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "model" })
	if given || cat.ModelsDir == "" {
		pinned := *m
		pinned.Pin = true
		f.Models = append(f.Models, pinned)
	}
	ms := make([]*config.Model, len(f.Models))
	for i := range f.Models {
		ms[i] = &f.Models[i]
	}
	if err := resolveHubModels(ctx, ms, hubOptions(log)); err != nil {
		return nil, err
	}
	template := *m.Native
	template.Model = ""
	return OpenCatalog(ctx, f, &template, log)
}
