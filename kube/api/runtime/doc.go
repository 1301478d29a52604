// Package runtime holds the interfaces every API object and list
// satisfies, and RawExtension, an embedded object kept as JSON.
package runtime
