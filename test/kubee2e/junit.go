package kubee2e

import (
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// State is how a spec ended.
type State string

// The states a Report gives its specs. Ginkgo's other ends (timedout,
// interrupted, aborted, panicked) are failures, and a pending spec is a
// skipped one; Spec.Reason says which.
const (
	Passed  State = "passed"
	Failed  State = "failed"
	Skipped State = "skipped"
)

// Spec is one spec the run selected.
type Spec struct {
	// Name is the spec's full text, as the JUnit report names it less
	// its "[It] ": containers, leaf and inline tags ("[sig-network] Netpol
	// ... [Feature:NetworkPolicy]"). A set-up node of the suite that did
	// not pass is reported too, under its own name
	// ("[SynchronizedBeforeSuite]").
	Name     string
	State    State
	Duration time.Duration
	// Reason is the first line of a failure's message, or why the spec
	// was skipped; empty for a passed spec.
	Reason string
	// Failure is the whole failure (message and location), and Output
	// the spec's timeline (its log, steps and failure), for a failed spec:
	// the reachability tables of a NetworkPolicy spec are in Output.
	Failure, Output string
}

// Report is what one run of the suite reported about the specs it
// selected, in the order they ran.
type Report struct {
	Specs []Spec
	// Duration is the suite's run time, as the report gives it.
	Duration time.Duration
}

// Count returns how many specs ended in state.
func (r *Report) Count(state State) int {
	n := 0
	for _, s := range r.Specs {
		if s.State == state {
			n++
		}
	}
	return n
}

// In returns the specs that ended in state.
func (r *Report) In(state State) []Spec {
	var out []Spec
	for _, s := range r.Specs {
		if s.State == state {
			out = append(out, s)
		}
	}
	return out
}

// Skip is a part of the selection left out on purpose, with the reason the
// report gives the specs it leaves out.
type Skip struct {
	// Pattern is a regular expression on a spec's full text, passed to
	// the suite as --ginkgo.skip.
	Pattern string
	// Reason is what the report says of the specs Pattern skipped
	// ("this kernel has no SCTP").
	Reason string
}

// junitSuites is the part of Ginkgo's JUnit report (reporters/junit_report.go)
// ParseJUnit reads.
type junitSuites struct {
	Suites []struct {
		Time  float64 `xml:"time,attr"`
		Cases []struct {
			Name    string        `xml:"name,attr"`
			Status  string        `xml:"status,attr"`
			Time    float64       `xml:"time,attr"`
			Skipped *junitSkipped `xml:"skipped"`
			Failure *junitFailure `xml:"failure"`
			Error   *junitFailure `xml:"error"`
			Output  string        `xml:"system-err"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// junitSkipped is a <skipped>: "skipped", "pending", or "skipped - WHY"
// when the spec called Skip(WHY).
type junitSkipped struct {
	Message string `xml:"message,attr"`
}

// junitFailure is a <failure> or an <error>. The e2e framework's report
// leaves the message attribute empty; the text holds the message and
// where it failed.
type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// ParseJUnit reads the JUnit report a run of the suite wrote and returns the
// specs of it that match one of the focus patterns (regular expressions
// on the full text, as given to --ginkgo.focus; none selects all): the
// report lists every spec of the suite, those the focus left out as
// skipped. A selected spec skipped by one of skips gets that skip's
// reason; a set-up node of the suite that did not pass is returned as a
// failed spec.
func ParseJUnit(r io.Reader, focus []string, skips []Skip) (*Report, error) {
	focusRE, err := compileAny(focus)
	if err != nil {
		return nil, err
	}
	skipRE := make([]*regexp.Regexp, len(skips))
	for i, s := range skips {
		if skipRE[i], err = regexp.Compile(s.Pattern); err != nil {
			return nil, fmt.Errorf("parse skip pattern %q: %w", s.Pattern, err)
		}
	}
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("decode JUnit report: %w", err)
	}
	if len(doc.Suites) == 0 {
		return nil, fmt.Errorf("decode JUnit report: no <testsuite>")
	}
	rep := &Report{}
	for _, suite := range doc.Suites {
		rep.Duration += seconds(suite.Time)
		for _, tc := range suite.Cases {
			name, isSpec := strings.CutPrefix(tc.Name, "[It] ")
			switch {
			case !isSpec && tc.Status == "passed":
				continue // the suite's set-up and report nodes
			case isSpec && focusRE != nil && !focusRE.MatchString(name):
				continue
			}
			// A failed set-up node ([SynchronizedBeforeSuite]) is
			// kept: it failed every spec after it.
			s := Spec{Name: name, Duration: seconds(tc.Time)}
			switch {
			case tc.Status == "passed":
				s.State = Passed
			case tc.Skipped != nil || tc.Status == "skipped" || tc.Status == "pending":
				s.State = Skipped
				s.Reason = skipReason(tc.Status, tc.Skipped)
				for i, re := range skipRE {
					if re.MatchString(tc.Name) {
						s.Reason = skips[i].Reason
						break
					}
				}
			default:
				f := tc.Failure
				if f == nil {
					f = tc.Error
				}
				s.State = Failed
				s.Reason, s.Failure = failureReason(tc.Status, f)
				s.Output = tc.Output
			}
			rep.Specs = append(rep.Specs, s)
		}
	}
	return rep, nil
}

// compileAny compiles patterns into one expression matching any of them,
// or nil for none.
func compileAny(patterns []string) (*regexp.Regexp, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	var alt []string
	for _, p := range patterns {
		if _, err := regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("parse focus pattern %q: %w", p, err)
		}
		alt = append(alt, "(?:"+p+")")
	}
	return regexp.Compile(strings.Join(alt, "|"))
}

// skipReason turns Ginkgo's skip message into the reason alone.
func skipReason(status string, sk *junitSkipped) string {
	if status == "pending" {
		return "pending (marked so in the suite)"
	}
	msg := ""
	if sk != nil {
		msg = sk.Message
	}
	if why, ok := strings.CutPrefix(msg, "skipped - "); ok {
		return firstLine(why)
	}
	return "skipped, no reason given"
}

// failureReason returns the first line of a failure's message, prefixed
// with the way it ended when that is not a plain failure, and the whole
// failure text.
func failureReason(status string, f *junitFailure) (string, string) {
	if f == nil {
		return status + ", no failure recorded", ""
	}
	text := strings.TrimSpace(f.Text)
	msg := f.Message
	if msg == "" {
		// "[FAILED] message\nIn [It] at: file:line @ time"
		msg = text
		if strings.HasPrefix(msg, "[") {
			if _, rest, ok := strings.Cut(msg, "] "); ok {
				msg = rest
			}
		}
	}
	reason := firstLine(msg)
	if status != "failed" && status != "" {
		reason = status + ": " + reason
	}
	return reason, text
}

// firstLine returns the first non-blank line of s, trimmed.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

func seconds(f float64) time.Duration {
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond)
}
