package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"lockstep.dev/lockstep/test/testenv"
)

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(fmt.Errorf("start go test: %w", err))
	}
	skipped, readErr := relay(stdout, os.Stdout)
	waitErr := cmd.Wait()
	if readErr != nil {
		fatal(readErr)
	}
	privileged := os.Getenv(testenv.PrivilegedEnv) == "1"
	if len(skipped) > 0 {
		verb := "skipped"
		if privileged {
			verb = "skipped, which a run with " + testenv.PrivilegedEnv + "=1 does not allow"
		}
		fmt.Printf("\n%d tests %s:\n", len(skipped), verb)
		for _, s := range skipped {
			fmt.Println("  " + s)
		}
	}
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		os.Exit(exit.ExitCode())
	case waitErr != nil:
		fatal(fmt.Errorf("run go test: %w", waitErr))
	case privileged && len(skipped) > 0:
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "noskip:", err)
	os.Exit(2)
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's or package's end
}

// slowTest is how long a top-level test runs before its pass is printed
// with its time: where a long run spends it.
const slowTest = 30.0

// relay reads go test's JSON events from r and writes to w what a plain
// go test would print: package-level output (the ok/FAIL lines, build and
// panic output) as it comes, a test's own output only if it fails; and,
// for each top-level test that passed in slowTest or more, its package,
// name and time. It returns every skipped test as "package Test: reason".
func relay(r io.Reader, w io.Writer) (skipped []string, err error) {
	type key struct{ pkg, test string }
	held := map[key][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			// Not an event (a build error on stdout): pass it through.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		k := key{ev.Package, ev.Test}
		switch {
		case ev.Action == "build-output":
			fmt.Fprint(w, ev.Output)
		case ev.Test == "" && ev.Action == "output":
			if ev.Output != "PASS\n" { // go test -json's own; a plain go test prints only "ok"
				fmt.Fprint(w, ev.Output)
			}
		case ev.Action == "output":
			held[k] = append(held[k], ev.Output)
		case ev.Action == "fail":
			// In one write: make test runs two of these side by side.
			fmt.Fprint(w, strings.Join(held[k], ""))
			delete(held, k)
		case ev.Action == "skip" && ev.Test != "":
			skipped = append(skipped, fmt.Sprintf("%s %s: %s", ev.Package, ev.Test, skipReason(held[k])))
			delete(held, k)
		case ev.Action == "pass":
			delete(held, k)
			if ev.Test != "" && !strings.Contains(ev.Test, "/") && ev.Elapsed >= slowTest {
				fmt.Fprintf(w, "--- PASS: %s %s (%.1fs)\n", ev.Package, ev.Test, ev.Elapsed)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return skipped, fmt.Errorf("read go test output: %w", err)
	}
	// A test that never ended was cut off by a panic or the timeout of
	// its package: its output is what explains the failure.
	for k, out := range held {
		fmt.Fprintf(w, "output of %s %s, which never ended:\n%s", k.pkg, k.test, strings.Join(out, ""))
	}
	return skipped, nil
}

// skipReason is the message a skipped test logged with its Skip call: the
// output lines between its "=== RUN" and "--- SKIP" lines.
func skipReason(out []string) string {
	var msg []string
	for _, l := range out {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		msg = append(msg, t)
	}
	if len(msg) == 0 {
		return "no reason given"
	}
	return strings.Join(msg, " ")
}
