// Package equality compares API objects by meaning: a nil slice or map
// equals an empty one, and times are equal when they are the same instant.
package equality
