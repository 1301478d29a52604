package benchkit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Preflight is what every tool checks before it measures: how parsing its
// flags went (parseErr) and that it runs as root, which it needs because
// of what (e.g. "it creates network namespaces"). When the tool must not
// go on, Preflight has told stderr why and returns the exit status, with
// ok false: 0 after -h, 2 for bad flags, 1 when not root.
func Preflight(tool, what string, parseErr error, stderr io.Writer) (status int, ok bool) {
	switch {
	case errors.Is(parseErr, flag.ErrHelp):
		return 0, false
	case parseErr != nil:
		fmt.Fprintf(stderr, "%s: %v\n", tool, parseErr)
		return 2, false
	}
	if euid := os.Geteuid(); euid != 0 {
		fmt.Fprintf(stderr, "%s: must run as root (euid is %d): %s; try `sudo make bench`\n", tool, euid, what)
		return 1, false
	}
	return 0, true
}
