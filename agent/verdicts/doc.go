// Package verdicts serves the dataplane's verdict events to monitors: the
// agent owns the one reader of the ring buffer, turns each event's
// numbers (ifindex, identity, rule id) into names, and hands every event
// to every subscriber.
//
// Emission costs the programs a ring buffer write per verdict, so it is
// on only while somebody listens: the first subscriber turns it on, the
// last one to go turns it off, however it went (a closed connection, a
// SIGKILLed `lockstep monitor`: the agent sees its socket close). Two
// monitors no longer steal each other's events, and none can leave
// emission on.
package verdicts
