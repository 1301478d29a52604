// Package errors is the API server's failures as Go errors: StatusError
// carries the metav1.Status the server answered, and the Is functions tell
// the reasons apart (by reason, or by HTTP code when the server gave none).
package errors
