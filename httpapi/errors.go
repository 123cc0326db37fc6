package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jobdir/jobdir/jobstore"
)

// Error codes, the stable machine-readable part of an error response. Each
// is sent with the HTTP status named in its comment.
const (
	// CodeInvalidInput (400): the request is malformed: bad JSON, an unknown
	// field, a bad query parameter, an invalid job ID.
	CodeInvalidInput = "invalid_input"
	// CodeUnauthorized (401): the bearer token is missing or wrong.
	CodeUnauthorized = "unauthorized"
	// CodeForbidden (403): the request is refused whoever sends it: a
	// cross-origin request from a browser, or a Host other than an IP
	// address or localhost on a server without authentication.
	CodeForbidden = "forbidden"
	// CodeKindNotAllowed (403): the server's kind allow-list refuses the
	// submitted kind.
	CodeKindNotAllowed = "kind_not_allowed"
	// CodeNotFound (404): no job has that ID, or no route matches the path.
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed (405): the route exists but not for this method;
	// the Allow header lists the methods it accepts.
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeInvalidTransition (409): the job's state does not allow the
	// operation, for example retrying a running job. The error carries the
	// job ID and the from and to states.
	CodeInvalidTransition = "invalid_transition"
	// CodeScheduleExists (409): a schedule of that name exists, and the
	// request did not ask to replace it.
	CodeScheduleExists = "schedule_exists"
	// CodeBatchClosed (409): the submit adds a job to a batch whose
	// callback was submitted already (jobstore.ErrBatchClosed); nothing
	// was submitted.
	CodeBatchClosed = "batch_closed"
	// CodeDependencyFailed (409): the retried job depends on a job that
	// failed or was canceled and is still so (jobstore.ErrDependencyFailed):
	// retry that one first.
	CodeDependencyFailed = "dependency_failed"
	// CodeDependedOn (409): the finished job cannot be deleted while a
	// waiting job depends on it (jobstore.ErrDependedOn).
	CodeDependedOn = "depended_on"
	// CodePayloadTooLarge (413): the request body or the job payload is over
	// the limit.
	CodePayloadTooLarge = "payload_too_large"
	// CodeInvalidSpec (422): the submit body is well-formed JSON but the job
	// it describes is invalid, for example an empty kind or a priority out
	// of range; for a batch, one of its jobs is, or it holds more than
	// jobstore.MaxBatch.
	CodeInvalidSpec = "invalid_spec"
	// CodeInternal (500): an unexpected server or store error.
	CodeInternal = "internal"
	// CodeCorrupt (500): the job's stored record cannot be decoded.
	CodeCorrupt = "corrupt"
	// CodeNotImplemented (501): the store does not do what the route asks,
	// such as listing its workers (GET /v1/workers).
	CodeNotImplemented = "not_implemented"
	// CodeClosed (503): the store is closed, typically during shutdown.
	CodeClosed = "closed"
	// CodeUnavailable (503): the store did not answer (a health check
	// failed, or the request was canceled before the store answered).
	CodeUnavailable = "unavailable"
	// CodeBusy (503): the server is serving as many requests (or wait
	// long-polls, or bytes of request bodies) as its limits allow; the
	// Retry-After header says when to try again. Nothing was done.
	CodeBusy = "busy"
)

// Error is the body of every error response, under the key "error". Its
// fields are its JSON form; ID, From and To are set only for
// CodeInvalidTransition.
type Error struct {
	// Status is the HTTP status the error was sent with; it is not part of
	// the JSON body.
	Status int `json:"-"`
	// Code is one of the Code constants.
	Code string `json:"code"`
	// Message says what went wrong, for a person.
	Message string `json:"message"`
	// ID is the job the failed transition concerned.
	ID string `json:"id,omitempty"`
	// From is the state the job was in.
	From jobstore.State `json:"from,omitempty"`
	// To is the state the operation would have moved it to.
	To jobstore.State `json:"to,omitempty"`

	challenge  string        // WWW-Authenticate value of a 401
	retryAfter time.Duration // Retry-After of a 503 busy
	logged     bool          // the error behind it was logged with its details
}

// Error returns the code and the message.
func (e *Error) Error() string {
	return e.Code + ": " + e.Message
}

// errorResponse is the JSON envelope of an Error.
type errorResponse struct {
	Error *Error `json:"error"`
}

func newError(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// toError maps a store or decoding error to the Error sent to the client.
// invalidStatus and invalidCode apply to ErrInvalidInput that is not more
// specific: 400 invalid_input for a bad query or ID, 422 invalid_spec for a
// submitted spec the store refused. The message is err's without the
// package and operation it begins with (plainMessage) and with every
// absolute path shortened to its last element (see scrubPaths): where a
// store keeps its files is for the server's log, not for its clients.
func toError(err error, invalidStatus int, invalidCode string) *Error {
	var (
		apiErr  *Error
		te      *jobstore.TransitionError
		maxErr  *http.MaxBytesError
		message = plainMessage(scrubPaths(err.Error()))
	)
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &maxErr):
		return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
			"request body is over the limit of %d bytes", maxErr.Limit)
	// Before the transition errors, which these two wrap.
	case errors.Is(err, jobstore.ErrDependencyFailed):
		return newError(http.StatusConflict, CodeDependencyFailed, "%s", sentinelFree(message, jobstore.ErrDependencyFailed))
	case errors.Is(err, jobstore.ErrDependedOn):
		return newError(http.StatusConflict, CodeDependedOn, "%s", sentinelFree(message, jobstore.ErrDependedOn))
	case errors.Is(err, jobstore.ErrBatchClosed):
		return newError(http.StatusConflict, CodeBatchClosed, "%s", sentinelFree(message, jobstore.ErrBatchClosed))
	case errors.As(err, &te):
		e := newError(http.StatusConflict, CodeInvalidTransition, "%s", message)
		e.ID, e.From, e.To = te.ID, te.From, te.To
		return e
	case errors.Is(err, jobstore.ErrScheduleExists):
		return newError(http.StatusConflict, CodeScheduleExists, "%s", message)
	case errors.Is(err, jobstore.ErrInvalidTransition):
		return newError(http.StatusConflict, CodeInvalidTransition, "%s", message)
	case errors.Is(err, jobstore.ErrPayloadTooLarge):
		return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "%s", message)
	case errors.Is(err, jobstore.ErrInvalidID):
		return newError(http.StatusBadRequest, CodeInvalidInput, "%s", message)
	case errors.Is(err, jobstore.ErrInvalidInput):
		return newError(invalidStatus, invalidCode, "%s", message)
	case errors.Is(err, jobstore.ErrNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "%s", message)
	case errors.Is(err, jobstore.ErrClosed):
		return newError(http.StatusServiceUnavailable, CodeClosed, "%s", message)
	case errors.Is(err, jobstore.ErrCorrupt):
		return newError(http.StatusInternalServerError, CodeCorrupt, "%s", message)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return newError(http.StatusServiceUnavailable, CodeUnavailable, "%s", message)
	}
	return newError(http.StatusInternalServerError, CodeInternal, "%s", message)
}

// sentinelFree drops the text of sentinel from msg where more follows
// it: "invalid transition: a dependency failed: job X: dependency Y
// failed; retry that job first" reads "job X: dependency Y failed; retry
// that job first", the error's code saying the rest.
func sentinelFree(msg string, sentinel error) string {
	return strings.Replace(msg, sentinel.Error()+": ", "", 1)
}

// packagePrefix is the "pkg: op: " with which a library error begins.
var packagePrefix = regexp.MustCompile(`^(?:filestore|memstore|pgstore|jobstore|execjob|runner): (?:[a-z][a-z ]*: )?`)

// plainMessage drops the package and operation that begin a library
// error's message: the client knows what it asked for, and "filestore:
// get: job X: job not found" reads as "job X: job not found".
func plainMessage(msg string) string {
	return packagePrefix.ReplaceAllString(msg, "")
}

// scrubPaths shortens every absolute file path in msg to ".../" and its
// last element, so that "open /srv/jobs/done/X.json: permission denied"
// becomes "open .../X.json: permission denied". A path starts with "/" at
// the start of msg or after a space, quote, parenthesis or bracket, and
// ends before a space, quote, parenthesis, bracket, comma, semicolon or
// colon.
func scrubPaths(msg string) string {
	if !strings.Contains(msg, "/") {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); {
		if msg[i] != '/' || i > 0 && !strings.ContainsRune(" \t\n\"'`([{", rune(msg[i-1])) {
			b.WriteByte(msg[i])
			i++
			continue
		}
		j := i + 1
		for j < len(msg) && !strings.ContainsRune(" \t\n\"'`)]},;:", rune(msg[j])) {
			j++
		}
		if path := msg[i:j]; path == "/" {
			b.WriteString(path)
		} else {
			b.WriteString(".../" + filepath.Base(path))
		}
		i = j
	}
	return b.String()
}
