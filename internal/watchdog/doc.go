// Package watchdog tells a liveness probe which of a process's
// long-running loops stopped turning.
//
// A liveness probe that only proves the HTTP server answers misses what
// actually hangs a node agent: a loop blocked on a lock, a command that
// never returns, a goroutine that exited. So each long-running loop
// registers with a Watchdog and beats once per turn; a loop that is idle
// turns anyway on its Loop's Tick, at least four times per deadline. Check
// fails, naming the loop and how long it has been silent, once one has not
// beaten for its deadline.
//
// Deadlines are minutes, not seconds: a loop waiting for an API server
// that is slow or away is turning (its retries beat), and must never look
// dead. Ages are measured on the monotonic clock, so a step of the wall
// clock cannot trip the watchdog.
//
// A nil *Loop is valid and does nothing, so packages take an optional Loop
// without caring whether anyone watches.
package watchdog
