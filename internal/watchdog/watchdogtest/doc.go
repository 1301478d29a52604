// Package watchdogtest holds the assertions the tests of watched loops
// share: a loop stays alive while idle, falls silent when its work hangs,
// and recovers once the work returns.
package watchdogtest
