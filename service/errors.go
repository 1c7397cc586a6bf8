package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"rill/engine"
	"rill/openapi"
)

// OpenAI's error types.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
)

// apiError is an error in OpenAI's wire shape together with the HTTP status
// that carries it. Empty Param and Code are written as null.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string
	Code    string
	// RetryAfter, when positive, is sent as a Retry-After header (seconds).
	RetryAfter int
}

func (e *apiError) Error() string { return e.Message }

// appendJSON appends {"error":{"message":...,"type":...,"param":...,"code":...}}.
func (e *apiError) appendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = e.appendObject(b)
	return append(b, '}')
}

// appendObject appends the inner object {"message":...,"type":...,"param":...,"code":...},
// which the WebSocket transport wraps in its own envelope. The message is
// cut to maxMessageBytes, a backstop for messages that carry text from
// elsewhere (an upstream engine's answer), and the param, which can name a
// client's key, to maxEchoBytes.
func (e *apiError) appendObject(b []byte) []byte {
	b = append(b, `{"message":`...)
	b = appendString(b, clip(e.Message, maxMessageBytes))
	b = append(b, `,"type":`...)
	b = appendString(b, e.Type)
	b = append(b, `,"param":`...)
	b = appendNullableString(b, clip(e.Param, maxEchoBytes))
	b = append(b, `,"code":`...)
	b = appendNullableString(b, e.Code)
	return append(b, '}')
}

// invalid is a 400 invalid_request_error.
func invalid(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest,
		Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// unsupported is the 400 for a feature rill does not implement and that would
// change the result if it were silently ignored.
func unsupported(param, what string) *apiError {
	return invalid(param, "unsupported_parameter", "%s is not supported by this server.", what)
}

// fromValidation turns the validator's verdict on a request body into a 400.
func fromValidation(err error) *apiError {
	var fe *openapi.FieldError
	if errors.As(err, &fe) {
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest,
			Param: fe.Param, Code: fe.Code, Message: fe.Message}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer,
		Message: "The server could not validate the request."}
}

// codeOverloaded is the error code of a request shed by admission control.
const codeOverloaded = "engine_overloaded"

// codeModelLoadFailed is the code of a request whose model could not be loaded.
const codeModelLoadFailed = "model_load_failed"

// codeModelUnloaded is the code of a request whose model was unloaded
// before it finished.
const codeModelUnloaded = "model_unloaded"

// fromEngine maps an error of engine.Engine.Generate or of an engine.Stream to
// the wire: *engine.RequestError is the client's fault (400), an unknown
// model is a 404 model_not_found, an overloaded engine a 503 to retry, a
// model unloaded under the request a 503 model_unloaded to retry, a
// failed upstream engine (engine.ErrUpstream) a 502, and anything else a
// 500. A cancelled context (the client left) maps to 499, which is only
// ever logged.
func fromEngine(err error, model string) *apiError {
	var re *engine.RequestError
	switch {
	case errors.As(err, &re):
		msg := re.Message
		if msg == "" {
			msg = "The request was rejected by the engine."
		}
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest,
			Param: re.Param, Code: re.Code, Message: msg}
	case errors.Is(err, engine.ErrUnknownModel):
		return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model",
			Code: "model_not_found", Message: fmt.Sprintf("The model '%s' does not exist.", clip(model, maxEchoBytes))}
	case errors.Is(err, engine.ErrOverloaded):
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer,
			Code: codeOverloaded, RetryAfter: 1,
			Message: "The engine is currently overloaded; please retry shortly."}
	case errors.Is(err, engine.ErrModelLoad):
		// The server's fault, not the request's, and maybe passing (a
		// file being replaced, memory held by a model on its way out).
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelLoadFailed,
			Message: fmt.Sprintf("The model '%s' could not be loaded: %s", clip(model, maxEchoBytes), clip(err.Error(), maxMessageBytes))}
	case errors.Is(err, engine.ErrModelUnloaded):
		// Not the client's cancel: it may retry, which loads the model again.
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: codeModelUnloaded, RetryAfter: 1,
			Message: fmt.Sprintf("The model '%s' was unloaded before this request finished; retry it.", clip(model, maxEchoBytes))}
	case errors.Is(err, engine.ErrUpstream):
		return &apiError{Status: http.StatusBadGateway, Type: typeServer, Code: "upstream_error",
			Message: "The upstream engine failed: " + err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: statusClientClosed, Type: typeServer,
			Message: "The request was cancelled."}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer,
		Message: "The engine failed: " + err.Error()}
}

// statusClientClosed is nginx's "client closed request", used in logs only.
const statusClientClosed = 499

// Caps on client text quoted back in error messages, so that an error is
// never an echo of a large request: maxEchoBytes for one value (a model
// id, a path, an origin), maxMessageBytes for a whole message.
const (
	maxEchoBytes    = 256
	maxMessageBytes = 2048
)

// clip returns s cut to at most n bytes at a UTF-8 boundary, with "…"
// appended when it was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// writeError writes e as a complete JSON response, in Anthropic's shape
// on the Messages API's paths (anthropic_errors.go). It must be called
// before anything else was written to w.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="rill"`)
	}
	status, body := e.Status, e.appendJSON(make([]byte, 0, 256))
	if anthropicErrors(w) {
		status, _ = anthropicStatus(e)
		body = appendAnthropicError(body[:0], e)
	}
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
