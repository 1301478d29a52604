//go:build unix

package persist

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockShared takes a shared flock on f, the lock bbolt's readers take, so
// that no agent commits to the file while check reads its pages: it
// retries until timeout (0: once) and reports whether it got the lock.
func lockShared(f *os.File, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return false, err
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
