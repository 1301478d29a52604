// Package endpoints owns the life cycle of pod network attachments on a
// node: reserving addresses on ADD, confirming or rolling back the ADD,
// releasing on DEL and GC, and restoring everything from the state file on
// start.
//
// Every change is one store write transaction whose durable part is written
// to the state file before the transaction commits and before the caller
// gets an answer (see package persist). An address is therefore never
// handed out twice across a crash, and a release is never forgotten.
//
// ADD is two calls with the plugin's netlink work in between. The endpoint
// is Pending from Add to Confirm. A DEL that arrives meanwhile marks it
// Cancelled and waits (bounded) until the ADD has rolled back through Abort;
// the ADD's Confirm then fails with api.CodeCancelled. So ADD and DEL of one
// attachment are serialised and the DEL wins, and the address is not reused
// while the cancelled ADD may still hold routes to it.
package endpoints
