// Package watch holds the events of a watch and the interface of a watch
// stream.
package watch
