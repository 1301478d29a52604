// Command demo is `make demo`: a standalone lockstep node, with no cluster,
// built from network namespaces on this machine.
//
// It starts the real agent inside a throwaway "node" namespace, creates a
// handful of pods (one namespace each) through the real CNI path — libcni
// executing bin/lockstep-cni, exactly as a container runtime would — prints
// each pod's addresses and a ping matrix between all of them and the node,
// then deletes the pods through CNI DEL and removes everything. Ctrl-C at
// any point still tears everything down.
//
// Run it as root: go run ./tools/demo -bin bin
package main
