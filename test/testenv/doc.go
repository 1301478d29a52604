// Package testenv holds the small gates lockstep's tests share to decide
// whether they can run on the current machine.
//
// Privileged tests create network namespaces, veth pairs and routes. They
// live in *_privileged_test.go files, are named TestPrivileged..., and begin
// with a call to [Privileged]. One environment switch, LOCKSTEP_PRIVILEGED=1,
// turns them all on: CI sets it, a developer's plain `go test ./...` skips
// them. Once the switch is set, a missing privilege is a failure rather than
// a skip, so a CI run cannot turn green by silently testing nothing.
package testenv
