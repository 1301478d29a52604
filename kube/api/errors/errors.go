package errors

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/schema"
)

// StatusError is a failure the API server answered with a Status.
type StatusError struct {
	ErrStatus metav1.Status
}

// Error returns the server's message.
func (e *StatusError) Error() string { return e.ErrStatus.Message }

// Status returns the Status.
func (e *StatusError) Status() metav1.Status { return e.ErrStatus }

// APIStatus is an error that carries a Status.
type APIStatus interface {
	Status() metav1.Status
}

// FromObject returns the error an ERROR event of a watch carries: a
// StatusError for a failed Status, else an error naming what it got.
func FromObject(obj runtime.Object) error {
	if s, ok := obj.(*metav1.Status); ok && s.Status != metav1.StatusSuccess {
		return &StatusError{ErrStatus: *s}
	}
	return fmt.Errorf("unexpected object in a watch error event: %T", obj)
}

func newStatus(code int32, reason metav1.StatusReason, qr schema.GroupResource, name, message string) *StatusError {
	return &StatusError{metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     code,
		Reason:   reason,
		Details:  &metav1.StatusDetails{Group: qr.Group, Kind: qr.Resource, Name: name},
		Message:  message,
	}}
}

// NewNotFound returns the error of a missing object.
func NewNotFound(qr schema.GroupResource, name string) *StatusError {
	return newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, qr, name, fmt.Sprintf("%s %q not found", qr, name))
}

// NewAlreadyExists returns the error of a create whose name is taken.
func NewAlreadyExists(qr schema.GroupResource, name string) *StatusError {
	return newStatus(http.StatusConflict, metav1.StatusReasonAlreadyExists, qr, name, fmt.Sprintf("%s %q already exists", qr, name))
}

// NewConflict returns the error of a write on a stale resourceVersion.
func NewConflict(qr schema.GroupResource, name string, err error) *StatusError {
	return newStatus(http.StatusConflict, metav1.StatusReasonConflict, qr, name, fmt.Sprintf("Operation cannot be fulfilled on %s %q: %v", qr, name, err))
}

// NewForbidden returns the error of a request RBAC refuses.
func NewForbidden(qr schema.GroupResource, name string, err error) *StatusError {
	return newStatus(http.StatusForbidden, metav1.StatusReasonForbidden, qr, name, fmt.Sprintf("%s %q is forbidden: %v", qr, name, err))
}

// NewResourceExpired returns the error of a list or watch from a
// resourceVersion the server no longer has.
func NewResourceExpired(message string) *StatusError {
	return &StatusError{metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: message}}
}

// NewInternalError returns a server-side failure.
func NewInternalError(err error) *StatusError {
	return &StatusError{metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusInternalServerError,
		Reason:  metav1.StatusReasonInternalError,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Message: err.Error()}}},
		Message: fmt.Sprintf("Internal error occurred: %v", err),
	}}
}

// NewServiceUnavailable returns the error of a server that cannot answer
// now.
func NewServiceUnavailable(reason string) *StatusError {
	return &StatusError{metav1.Status{Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable, Message: reason}}
}

// NewTooManyRequests returns the error of a request the server throttled.
func NewTooManyRequests(message string, retryAfterSeconds int) *StatusError {
	return &StatusError{metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusTooManyRequests,
		Reason:  metav1.StatusReasonTooManyRequests,
		Message: message,
		Details: &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfterSeconds)},
	}}
}

// NewGenericServerResponse returns the error of an HTTP answer with no
// Status in its body: its reason follows from the code (a 409 to a POST is
// AlreadyExists, to anything else Conflict), as the upstream client gives
// it; a code with no reason of its own here (410 Gone, for one) is told
// apart by the Is functions by its code.
func NewGenericServerResponse(code int, verb string, qr schema.GroupResource, name, serverMessage string, retryAfterSeconds int, isUnexpectedResponse bool) *StatusError {
	reason := metav1.StatusReasonUnknown
	message := fmt.Sprintf("the server responded with the status code %d but did not return more information", code)
	switch code {
	case http.StatusConflict:
		if verb == http.MethodPost {
			reason = metav1.StatusReasonAlreadyExists
		} else {
			reason = metav1.StatusReasonConflict
		}
		message = "the server reported a conflict"
	case http.StatusNotFound:
		reason, message = metav1.StatusReasonNotFound, "the server could not find the requested resource"
	case http.StatusBadRequest:
		reason, message = metav1.StatusReasonBadRequest, "the server rejected our request for an unknown reason"
	case http.StatusUnauthorized:
		reason, message = metav1.StatusReasonUnauthorized, "the server has asked for the client to provide credentials"
	case http.StatusForbidden:
		// The server's text says who may not do what: keep it.
		reason, message = metav1.StatusReasonForbidden, serverMessage
	case http.StatusNotAcceptable:
		reason = metav1.StatusReasonNotAcceptable
		message = "the server was unable to respond with a content type that the client supports"
		if serverMessage != "" && serverMessage != "unknown" {
			message = serverMessage
		}
	case http.StatusUnsupportedMediaType:
		reason, message = metav1.StatusReasonUnsupportedMediaType, serverMessage
	case http.StatusMethodNotAllowed:
		reason, message = metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"
	case http.StatusUnprocessableEntity:
		reason, message = metav1.StatusReasonInvalid, "the server rejected our request due to an error in our request"
	case http.StatusServiceUnavailable:
		reason, message = metav1.StatusReasonServiceUnavailable, "the server is currently unable to handle the request"
	case http.StatusGatewayTimeout:
		reason, message = metav1.StatusReasonTimeout, "the server was unable to return a response in the time allotted, but may still be processing the request"
	case http.StatusTooManyRequests:
		reason, message = metav1.StatusReasonTooManyRequests, "the server has received too many requests and has asked us to try again later"
	default:
		if code >= 500 {
			reason, message = metav1.StatusReasonInternalError, fmt.Sprintf("an error on the server (%q) has prevented the request from succeeding", serverMessage)
		}
	}
	switch verb = strings.ToLower(verb); {
	case name != "" && qr != (schema.GroupResource{}):
		message = fmt.Sprintf("%s (%s %s %s)", message, verb, qr, name)
	case qr != (schema.GroupResource{}):
		message = fmt.Sprintf("%s (%s %s)", message, verb, qr)
	}
	var causes []metav1.StatusCause
	if isUnexpectedResponse {
		causes = []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: serverMessage}}
	}
	return &StatusError{metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    int32(code),
		Reason:  reason,
		Details: &metav1.StatusDetails{Group: qr.Group, Kind: qr.Resource, Name: name, Causes: causes, RetryAfterSeconds: int32(retryAfterSeconds)},
		Message: message,
	}}
}

func status(err error) (metav1.Status, bool) {
	var s APIStatus
	if errors.As(err, &s) {
		return s.Status(), true
	}
	return metav1.Status{}, false
}

// ReasonForError returns the reason of err, StatusReasonUnknown when it
// carries no Status.
func ReasonForError(err error) metav1.StatusReason {
	s, _ := status(err)
	return s.Reason
}

// knownReason reports the reasons this package names. A Status with no
// reason or another one (an aggregated API's, a proxy's) is told apart by
// its HTTP code, as the upstream client does.
func knownReason(r metav1.StatusReason) bool {
	switch r {
	case metav1.StatusReasonUnauthorized, metav1.StatusReasonForbidden,
		metav1.StatusReasonNotFound, metav1.StatusReasonAlreadyExists, metav1.StatusReasonConflict,
		metav1.StatusReasonGone, metav1.StatusReasonInvalid, metav1.StatusReasonServerTimeout,
		metav1.StatusReasonTimeout, metav1.StatusReasonTooManyRequests, metav1.StatusReasonBadRequest,
		metav1.StatusReasonMethodNotAllowed, metav1.StatusReasonNotAcceptable,
		metav1.StatusReasonRequestEntityTooLarge, metav1.StatusReasonUnsupportedMediaType,
		metav1.StatusReasonInternalError, metav1.StatusReasonExpired, metav1.StatusReasonServiceUnavailable,
		metav1.StatusReasonStoreReadError:
		return true
	}
	return false
}

// reasonOrCode reports whether err carries reason, or an HTTP code of
// code (when code is not 0) with a reason this package does not name.
func reasonOrCode(err error, reason metav1.StatusReason, code int32) bool {
	s, ok := status(err)
	if !ok {
		return false
	}
	if s.Reason == reason {
		return true
	}
	return code != 0 && !knownReason(s.Reason) && s.Code == code
}

// IsNotFound reports a missing object.
func IsNotFound(err error) bool {
	return reasonOrCode(err, metav1.StatusReasonNotFound, http.StatusNotFound)
}

// IsAlreadyExists reports a create whose name is taken.
func IsAlreadyExists(err error) bool { return reasonOrCode(err, metav1.StatusReasonAlreadyExists, 0) }

// IsConflict reports a write on a stale resourceVersion (or a failed
// precondition).
func IsConflict(err error) bool {
	return reasonOrCode(err, metav1.StatusReasonConflict, http.StatusConflict)
}

// IsForbidden reports a request RBAC refused.
func IsForbidden(err error) bool {
	return reasonOrCode(err, metav1.StatusReasonForbidden, http.StatusForbidden)
}

// IsUnauthorized reports a request without valid credentials.
func IsUnauthorized(err error) bool {
	return reasonOrCode(err, metav1.StatusReasonUnauthorized, http.StatusUnauthorized)
}

// IsGone reports a resource that is gone (HTTP 410 with that reason).
func IsGone(err error) bool { return reasonOrCode(err, metav1.StatusReasonGone, http.StatusGone) }

// IsResourceExpired reports a resourceVersion the server no longer has.
func IsResourceExpired(err error) bool { return reasonOrCode(err, metav1.StatusReasonExpired, 0) }

// IsTooManyRequests reports a request the server throttled: that reason,
// or HTTP 429 whatever the reason.
func IsTooManyRequests(err error) bool {
	s, ok := status(err)
	return ok && (s.Reason == metav1.StatusReasonTooManyRequests || s.Code == http.StatusTooManyRequests)
}

// IsInvalid reports an object the server refused as invalid.
func IsInvalid(err error) bool {
	return reasonOrCode(err, metav1.StatusReasonInvalid, http.StatusUnprocessableEntity)
}

// HasStatusCause reports whether err's Status names cause t.
func HasStatusCause(err error, t metav1.CauseType) bool {
	s, ok := status(err)
	if !ok || s.Details == nil {
		return false
	}
	for _, c := range s.Details.Causes {
		if c.Type == t {
			return true
		}
	}
	return false
}
