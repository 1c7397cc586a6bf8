package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracesPath is where an OTLP/HTTP receiver takes traces, below the base
// URL that --otlp-endpoint and OTEL_EXPORTER_OTLP_ENDPOINT name.
const tracesPath = "/v1/traces"

// tracing is serve's OpenTelemetry trace pipeline: a provider whose spans
// are batched and exported over OTLP/HTTP (protobuf), or none.
type tracing struct {
	provider *sdktrace.TracerProvider // nil: tracing is off
	// endpoint is where the spans go, for the log: the flag's URL, or the
	// variable that named it.
	endpoint string
}

// newTracing sets up tracing from serve's --otlp-endpoint (flagURL, the
// receiver's base URL: traces go to its /v1/traces) or, without it, from
// the standard environment: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT turn it on, and the exporter and SDK read
// the rest themselves (headers, timeout, compression, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and its argument, the
// batch processor's OTEL_BSP_*). OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none turn it off whatever else is set. Off, it
// starts nothing: no exporter, no goroutine, and the service makes no
// spans. getenv reads the environment (os.Getenv; tests pass their own).
func newTracing(ctx context.Context, flagURL string, getenv func(string) string, version string) (*tracing, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return &tracing{}, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "", "otlp":
	case "none":
		return &tracing{}, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: rill exports traces over OTLP only (otlp or none)", exp)
	}
	var opts []otlptracehttp.Option
	var endpoint string
	switch {
	case flagURL != "":
		u, err := url.Parse(flagURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--otlp-endpoint %q: want the OTLP/HTTP receiver's base URL, such as http://localhost:4318", flagURL)
		}
		u.Path = strings.TrimSuffix(u.Path, "/") + tracesPath
		endpoint = u.Redacted()
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		endpoint = "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" // the exporter reads it
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		endpoint = "$OTEL_EXPORTER_OTLP_ENDPOINT"
	default:
		return &tracing{}, nil
	}
	for _, key := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(key); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%s: rill exports traces over http/protobuf only", key, p)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	// rill's name and version first: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, read after them, win.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "rill"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return &tracing{provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), endpoint: endpoint}, nil
}

// on reports whether spans are exported.
func (t *tracing) on() bool { return t.provider != nil }

// tracerProvider is the provider for the service's Options; nil when off.
func (t *tracing) tracerProvider() trace.TracerProvider {
	if t.provider == nil {
		return nil
	}
	return t.provider
}

// shutdown exports the spans still buffered, within ctx, and stops the
// exporter; a failure is logged, since the server is done by then.
func (t *tracing) shutdown(ctx context.Context, log *slog.Logger) {
	if t.provider == nil {
		return
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("exporting the last traces failed", slog.Any("err", err))
	}
}

// environ is os.Getenv, for newTracing.
var environ = os.Getenv
