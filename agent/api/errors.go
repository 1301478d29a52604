package api

import (
	"errors"
	"fmt"
)

// Error codes carried by [Error]. Codes below 100 are the CNI
// specification's own; codes from 100 up are lockstep's.
const (
	CodeIncompatibleVersion = 1
	CodeUnknownContainer    = 3
	CodeInvalidEnv          = 4
	CodeIOFailure           = 5
	CodeDecodeFailure       = 6
	CodeInvalidConfig       = 7
	CodeInvalidNetNS        = 8
	CodeTryAgainLater       = 11
	CodeNotAvailable        = 50

	// CodePoolExhausted: no free address in any pool of the needed family.
	CodePoolExhausted = 100
	// CodeCancelled: a DEL for the same attachment arrived while the ADD
	// was in flight; the ADD must roll back.
	CodeCancelled = 101
	// CodeBusy: another ADD for the same attachment is in flight.
	CodeBusy = 102
	// CodeCheckFailed: CHECK found the pod's network differs from the
	// agent's record.
	CodeCheckFailed = 103
	// CodeInternal: the agent could not complete the request, e.g. its
	// state file could not be written.
	CodeInternal = 110
)

// Error is the error body the agent sends, shaped like a CNI error so the
// plugin can hand it to the runtime unchanged.
type Error struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Details == "" {
		return e.Msg
	}
	return fmt.Sprintf("%s; %s", e.Msg, e.Details)
}

// Errorf builds an *Error with a formatted message.
func Errorf(code uint, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the *Error in err's chain, or 0 when there is
// none.
func CodeOf(err error) uint {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
