package main

import (
	"errors"
	"fmt"

	"github.com/ringcache/ringcache/internal/loadgen"
)

var (
	// errUsage marks bad command-line input; main exits with status 2.
	errUsage = errors.New("usage")
	// errNotFound marks a key the cluster does not have; main exits with
	// status 3.
	errNotFound = errors.New("not found")
	// errUnreachable marks a node that could not be reached at all (no
	// connection, or no answer in time), as opposed to one that answered
	// with an error.
	errUnreachable = errors.New("unreachable")
)

// nodeError is a request to one node that failed. Its message is one line
// that names the node's URL, because with several nodes the URL is what
// the user needs to act on.
type nodeError struct {
	URL    string // the node's base URL
	Op     string // what was asked: "GET /cache/demo/hello"
	Status int    // the HTTP status, 0 when there was no answer
	Msg    string // the node's short error text, or why there was no answer
	Err    error  // the transport's error when there was no answer
}

func (e *nodeError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: unreachable: %s", e.URL, e.Msg)
	}
	if e.Msg == "" {
		return fmt.Sprintf("%s: %s: %d", e.URL, e.Op, e.Status)
	}
	return fmt.Sprintf("%s: %s: %d %s", e.URL, e.Op, e.Status, e.Msg)
}

// Is makes a nodeError without an answer match errUnreachable.
func (e *nodeError) Is(target error) bool {
	return target == errUnreachable && e.Status == 0
}

func (e *nodeError) Unwrap() error { return e.Err }

// unreachableReason says in a few words why a request got no answer.
func unreachableReason(err error) string {
	r := loadgen.Reason(err)
	if r == loadgen.NoAnswerInTime {
		r += " (see -timeout)"
	}
	return r
}
