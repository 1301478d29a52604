// Command noskip runs `go test -json` with the arguments it is given,
// prints what a plain `go test` would (each package's result line, the
// output of failed tests) and the time of each top-level test that passed
// in 30 seconds or more (where a long run spends it), and fails the run
// if any test skipped while privileged tests are switched on
// (LOCKSTEP_PRIVILEGED=1).
//
// `make test` runs the suite through it because a skipped test tests
// nothing: on a CI machine every tool and kernel feature is there, so a
// test that skips there hides a broken harness or a test that can no longer
// fail. A test that cannot run on a machine says so with testenv.Missing,
// which fails under the switch and skips without it.
//
// Usage:
//
//	go run ./tools/noskip [go test flags] [packages]
package main
