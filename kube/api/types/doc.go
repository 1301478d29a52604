// Package types holds the small value types of the Kubernetes API that
// are not objects: UIDs, namespaced names and patch types.
package types
