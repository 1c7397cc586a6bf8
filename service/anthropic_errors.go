package service

import (
	"net/http"
	"strings"
)

// Errors on the Messages API's paths are in Anthropic's shape,
//
//	{"type":"error","error":{"type":"invalid_request_error","message":"…"}}
//
// with Anthropic's types and statuses, whatever refused the request:
// the API key, the browser policy, the validator, the engine, admission
// control, a shutdown. Every refusal is made as an apiError, as on every
// other path; writeError and the Messages transports restate it here, so
// that no refusal on these paths can come out in OpenAI's shape.

// Anthropic's error types.
const (
	anthropicInvalidRequest = "invalid_request_error"
	anthropicAuthentication = "authentication_error"
	anthropicPermission     = "permission_error"
	anthropicNotFound       = "not_found_error"
	anthropicTooLarge       = "request_too_large"
	anthropicRateLimit      = "rate_limit_error"
	anthropicTimeout        = "timeout_error"
	anthropicAPI            = "api_error"
	anthropicOverloaded     = "overloaded_error"
)

// statusOverloaded is Anthropic's status for an overloaded API.
const statusOverloaded = 529

// anthropicStatus returns the status and Anthropic error type of e: 400
// invalid_request_error, 401 authentication_error, 403 permission_error,
// 404 not_found_error, 408 timeout_error, 413 request_too_large, 429
// rate_limit_error, other server errors api_error with their status, and
// every 503 (an overloaded engine, a server shutting down) 529
// overloaded_error, the status Anthropic's clients retry as overload.
// Other client errors (405, 409, 426) keep their status as
// invalid_request_error.
func anthropicStatus(e *apiError) (status int, typ string) {
	switch s := e.Status; {
	case s == http.StatusUnauthorized:
		return s, anthropicAuthentication
	case s == http.StatusForbidden:
		return s, anthropicPermission
	case s == http.StatusNotFound:
		return s, anthropicNotFound
	case s == http.StatusRequestTimeout:
		return s, anthropicTimeout
	case s == http.StatusRequestEntityTooLarge:
		return s, anthropicTooLarge
	case s == http.StatusTooManyRequests:
		return s, anthropicRateLimit
	case s == http.StatusServiceUnavailable:
		return statusOverloaded, anthropicOverloaded
	case s >= 500 && s != statusClientClosed:
		return s, anthropicAPI
	}
	return e.Status, anthropicInvalidRequest
}

// appendAnthropicErrorObject appends the inner {"type":…,"message":…}.
// The message is cut as appendObject cuts OpenAI's; a param the message
// does not quote already is added to it, since the shape has no member
// for it.
func appendAnthropicErrorObject(b []byte, e *apiError) []byte {
	_, typ := anthropicStatus(e)
	msg := e.Message
	if e.Param != "" && !strings.Contains(msg, e.Param) {
		msg += " (param: " + clip(e.Param, maxEchoBytes) + ")"
	}
	b = append(b, `{"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"message":`...)
	b = appendString(b, clip(msg, maxMessageBytes))
	return append(b, '}')
}

// appendAnthropicError appends {"type":"error","error":{…}}, the body of
// an HTTP error and the data of a stream's error event.
func appendAnthropicError(b []byte, e *apiError) []byte {
	b = append(b, `{"type":"error","error":`...)
	b = appendAnthropicErrorObject(b, e)
	return append(b, '}')
}

// anthropicErrors reports whether w answers a Messages API path: ServeHTTP
// marks its recorder so.
func anthropicErrors(w http.ResponseWriter) bool {
	rec, ok := w.(*recorder)
	return ok && rec.anthropic
}

// messagesFieldNames restates the chat field names an engine's refusal
// quotes (in its param and its message) in the Messages API's names: its
// chat request's response_format is output_config.format, its
// chat_template_kwargs come from thinking, a tool's parameters are its
// input_schema.
var messagesFieldNames = strings.NewReplacer(
	"response_format", "output_config.format",
	"chat_template_kwargs", "thinking",
	".function.parameters", ".input_schema",
	".function.name", ".name",
)

// messagesError is e with its param (and the field names its message
// quotes) in the Messages API's names.
func messagesError(e *apiError) *apiError {
	if e == nil || e.Param == "" {
		return e
	}
	out := *e
	out.Param = messagesFieldNames.Replace(e.Param)
	out.Message = messagesFieldNames.Replace(e.Message)
	return &out
}
