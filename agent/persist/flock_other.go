//go:build !unix

package persist

import (
	"os"
	"time"
)

// lockShared is a no-op where flock does not exist: bbolt's own lock, taken
// when check opens the file after reading its pages, is the only one.
func lockShared(*os.File, time.Duration) (bool, error) { return true, nil }
