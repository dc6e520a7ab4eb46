package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"pbx/appliance/cdr"
)

// Error codes of the envelope, as the specification's Errors table lists.
const (
	CodeUnauthorized   = "unauthorized"
	CodeForbidden      = "forbidden"
	CodeNotFound       = "not_found"
	CodeInvalidRequest = "invalid_request"
	CodeRateLimited    = "rate_limited"
	CodeInternal       = "internal"
)

// Error is an error with its HTTP outcome. Message reaches the client; Err
// is for the log only.
type Error struct {
	Status  int
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Invalid is a 400 invalid_request.
func Invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// Forbidden is a 403.
func Forbidden(format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: fmt.Sprintf(format, args...)}
}

// NotFound is a 404.
func NotFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

// NotRunning is the 404 of a route whose component is not running.
func NotRunning(component string) *Error {
	return NotFound("%s is not running", component)
}

// Internal is a 500 whose cause goes to the log only.
func Internal(err error) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: internalMessage, Err: err}
}

const internalMessage = "internal error"

// envelope is the error body.
type envelope struct {
	Error envelopeBody `json:"error"`
}

type envelopeBody struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
}

// classify maps any error to its HTTP outcome. It is the one place where
// component errors become status codes.
func classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		if e.Status >= 500 {
			return &Error{Status: e.Status, Code: CodeInternal, Message: internalMessage, Err: err}
		}
		return e
	}
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, cdr.ErrNotFound), errors.Is(err, cdr.ErrID):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such record", Err: err}
	case errors.Is(err, cdr.ErrBadCursor):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: "cursor: not a cursor of this listing (take it from next_cursor)", Err: err}
	case errors.Is(err, cdr.ErrRange):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: "to is before from", Err: err}
	case errors.Is(err, cdr.ErrLimit):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: fmt.Sprintf("limit: must be 1 to %d", cdr.MaxLimit), Err: err}
	case errors.Is(err, cdr.ErrFilter), errors.Is(err, cdr.ErrTenant):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: "invalid filter value", Err: err}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: internalMessage, Err: err}
}

// WriteError renders err as the error envelope. A 5xx answer says only
// "internal error"; its cause is logged with the request id.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	e := classify(err)
	id := RequestIDFrom(r.Context())
	if e.Status >= 500 && log != nil {
		log.Error("api request failed", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", e.Err)
	}
	body, _ := json.Marshal(envelope{Error: envelopeBody{Code: e.Code, Message: e.Message, RequestID: id}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(body, '\n'))
}

// WriteJSON renders v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return Internal(fmt.Errorf("encode response: %w", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
	return nil
}
